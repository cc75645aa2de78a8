// Hostile and broken inputs through the `tokamax` binary: each is an exit-2 error naming the file
// (and line or offset), in bounded time, that writes nothing and changes nothing.
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "ops/framework/autotune_cache.h"
#include "ops/framework/errors.h"
#include "tests/test_util.h"

using namespace tokamax::testing;
using Catch::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kFast = " --impl cpu --min-time 0.005 --quiet ";

// A small real cache: the committed seed of the cache fuzz target.
std::string seed_cache() {
  return read_file(std::string(TOKAMAX_SOURCE_DIR) +
                   "/tests/fuzz/corpus/autotune_cache/layer_norm.json");
}

std::string catalog_with(const std::string& args) {
  return "op: ragged_dot\nspecs:\n  - name: hostile\n    args:\n" + args;
}

}  // namespace

TEST_CASE("a shape whose size overflows is exit 2 at binding, naming the file and line",
          "[cli][hostile]") {
  ScratchDir dir;
  write_file(dir.file("overflow.yaml"),
             catalog_with("      lhs: f32[4611686018427387904,4]\n      rhs: f32[1,4,4]\n"));
  const CommandResult r = run_tokamax("verify --spec " + dir.file("overflow.yaml"));
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains(dir.file("overflow.yaml") + ":5:") && Contains("overflows 64 bits"));
  CHECK_THAT(r.output, !Contains("bad_alloc"));

  write_file(dir.file("sum.yaml"),
             catalog_with("      lhs: f32[8,4]\n      rhs: f32[2,4,4]\n"
                          "      group_sizes: [9223372036854775807, 9223372036854775807]\n"));
  const CommandResult sum = run_tokamax("bench --spec " + dir.file("sum.yaml"));
  INFO(sum.output);
  CHECK(sum.exit_code == 2);
  CHECK_THAT(sum.output, Contains(dir.file("sum.yaml") + ":7:") &&
                             Contains("the sum of group_sizes overflows 64 bits"));
}

TEST_CASE("a catalog that is a device, a folder or 1 GiB is exit 2 at once", "[cli][hostile]") {
  ScratchDir dir;
  const CommandResult zero = run_tokamax("list --spec /dev/zero");
  CHECK(zero.exit_code == 2);
  CHECK_THAT(zero.output, Contains("/dev/zero: cannot read catalog: not a regular file"));
  write_file(dir.file("huge.yaml"), "");
  fs::resize_file(dir.file("huge.yaml"), std::uintmax_t{1} << 30);  // sparse: no disk used
  const CommandResult huge = run_tokamax("list --spec " + dir.file("huge.yaml"));
  CHECK(huge.exit_code == 2);
  CHECK_THAT(huge.output, Contains("the file is 1024 MiB, more than the 16 MiB a catalog may have"));
  const CommandResult folder = run_tokamax("tune --from " + dir.path().string() + kFast);
  CHECK(folder.exit_code == 2);
  CHECK_THAT(folder.output, Contains("is a directory"));
}

TEST_CASE("spec names that would leave --dump-dir are refused", "[cli][hostile]") {
  ScratchDir dir;
  for (const std::string& name : {std::string(".."), std::string("."), std::string(200, 'a')}) {
    write_file(dir.file("names.yaml"),
               "op: ragged_dot\nspecs:\n  - name: '" + name +
                   "'\n    args: {lhs: 'f32[8,4]', rhs: 'f32[2,4,4]'}\n");
    const CommandResult r = run_tokamax("verify --spec " + dir.file("names.yaml") + " --dump-dir " +
                                        dir.file("dump"));
    INFO(name << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(dir.file("names.yaml") + ":3:"));
    CHECK_FALSE(fs::exists(dir.file("dump")));
  }
  // Slashes and NUL are outside the names' alphabet already.
  write_file(dir.file("slash.yaml"),
             "op: ragged_dot\nspecs:\n  - name: ../../escape\n"
             "    args: {lhs: 'f32[8,4]', rhs: 'f32[2,4,4]'}\n");
  CHECK(run_tokamax("verify --spec " + dir.file("slash.yaml")).exit_code == 2);
}

TEST_CASE("export-cache --out-dir refuses device ids and op names that are not one file name",
          "[cli][hostile]") {
  ScratchDir dir;
  json cache = json::parse(seed_cache());
  json& entries = cache["entries"];
  const std::string device = entries.begin().key();
  entries["../../escaped"] = entries[device];
  write_file(dir.file("evil.json"), cache.dump(2));
  const CommandResult r = run_tokamax("export-cache --cache " + dir.file("evil.json") +
                                      " --out-dir " + dir.file("out/inner"));
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("device id '../../escaped' cannot be used as a file name"));
  CHECK_FALSE(fs::exists(dir.file("escaped")));
  CHECK_FALSE(fs::exists(dir.file("out/escaped")));
}

TEST_CASE("a cache truncated at any byte offset is an error naming the file, never a crash",
          "[cli][hostile]") {
  const std::string text = seed_cache();
  REQUIRE(text.size() > 500);
  // Every offset through the parser (the last: the whole file without its newline, valid).
  for (size_t offset = 0; offset + 1 < text.size(); ++offset) {
    INFO("offset " << offset);
    CHECK_THROWS_AS(tokamax::AutotuneCache::parse(text.substr(0, offset), "cut.json"),
                    tokamax::InputError);
  }
  CHECK_NOTHROW(tokamax::AutotuneCache::parse(text.substr(0, text.size() - 1), "cut.json"));
  // A few through the binary: exit 2 with file:line:column, the file untouched.
  ScratchDir dir;
  for (const size_t offset : {size_t{0}, size_t{1}, text.size() / 3, text.size() - 2}) {
    const std::string cut = text.substr(0, offset);
    write_file(dir.file("cut.json"), cut);
    const CommandResult r = run_tokamax("tune --op layer_norm --name smoke_ln_bf16 --max-evals 1" +
                                        kFast + "--cache " + dir.file("cut.json"));
    INFO("offset " << offset << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(dir.file("cut.json")));
    CHECK(read_file(dir.file("cut.json")) == cut);
  }
}

TEST_CASE("a cache from a future format version names the file and the version",
          "[cli][hostile]") {
  ScratchDir dir;
  json cache = json::parse(seed_cache());
  cache["format_version"] = 99;
  write_file(dir.file("future.json"), cache.dump(2));
  const std::string before = read_file(dir.file("future.json"));
  const CommandResult r = run_tokamax("tune --op layer_norm --name smoke_ln_bf16 --max-evals 1" +
                                      kFast + "--cache " + dir.file("future.json"));
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains(dir.file("future.json")) &&
                           Contains("format_version: 99 is newer than this build reads (1)"));
  CHECK(read_file(dir.file("future.json")) == before);
}

TEST_CASE("tune keeps the entries of other devices in the cache it writes", "[cli][hostile]") {
  ScratchDir dir;
  json cache = json::parse(seed_cache());
  json& entries = cache["entries"];
  const json other = entries.begin().value();
  entries.clear();
  entries["gpu-nvidia-h200-sm90-132sm"] = other;
  entries["cpu-some-other-machine"] = other;
  write_file(dir.file("fleet.json"), cache.dump(2));
  const CommandResult r = run_tokamax("tune --op layer_norm --name smoke_ln_bf16 --max-evals 1" +
                                      kFast + "--cache " + dir.file("fleet.json"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const json after = json::parse(read_file(dir.file("fleet.json")));
  CHECK(after["entries"]["gpu-nvidia-h200-sm90-132sm"] == other);
  CHECK(after["entries"]["cpu-some-other-machine"] == other);
  CHECK(after["entries"].size() == 3);  // and this machine's new entry
}
