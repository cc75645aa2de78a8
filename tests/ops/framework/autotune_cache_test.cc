// Tests for the autotuning cache: format round-trip, merge, filter, errors, locking, export-cache.
#include "ops/framework/autotune_cache.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "ops/framework/errors.h"

using namespace tokamax;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kArgs =
    R"({"args":{"lhs":"bf16[64,32]","rhs":"bf16[4,32,16]"},"op":"ragged_dot"})";

CacheEntry make_entry(int tile_m, double time_s, bool verified,
                      const std::string& timestamp = "2026-01-01T00:00:00Z") {
  CacheEntry entry;
  entry.config = {{"tile_m", tile_m}, {"tile_n", 256}};
  entry.time_s = time_s;
  entry.samples = {time_s, time_s * 1.01, time_s * 0.99};
  entry.verified = verified;
  entry.candidates = json::array({{{"config", entry.config}, {"time_s", time_s}}});
  entry.metadata = {{"timestamp", timestamp}, {"tokamax_version", "0.1.0"}};
  return entry;
}

AutotuneCache cache_of(const CacheKey& key, CacheEntry entry) {
  AutotuneCache cache;
  cache.put(key, std::move(entry));
  return cache;
}

// A fresh directory, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tokamax-cache-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Runs `tokamax <command_line>` in-process through the export-cache runner.
int run_export_cache(const std::string& command_line) {
  CLI::App app;
  cli::Runner runner = cli::add_export_cache_command(app);
  app.parse(command_line, false);
  return runner();
}

}  // namespace

TEST_CASE("cache round-trips through canonical JSON", "[cache]") {
  AutotuneCache cache;
  cache.put({"cpu-x", "ragged_dot", kArgs, "cpu"}, make_entry(64, 1.5e-3, true));
  cache.put({"cpu-x", "ragged_dot", kArgs, "openblas"}, make_entry(0, 2e-3, false));
  cache.put({"cpu-y", "ragged_dot_vjp", kArgs, "cpu"}, make_entry(32, 3e-3, true));
  CHECK(cache.size() == 3);
  const std::string text = cache.dump();
  CHECK(text.back() == '\n');
  CHECK(text.find("\"format_version\": 1") != std::string::npos);

  const AutotuneCache parsed = AutotuneCache::parse(text, "mem");
  CHECK(parsed.to_json() == cache.to_json());
  CHECK(parsed.dump() == text);
  const CacheEntry* entry = parsed.find({"cpu-x", "ragged_dot", kArgs, "cpu"});
  REQUIRE(entry != nullptr);
  CHECK(entry->config["tile_m"] == 64);
  CHECK(entry->samples.size() == 3);
  CHECK(entry->verified);
  CHECK(parsed.find({"cpu-x", "ragged_dot", kArgs, "cuda"}) == nullptr);

  // put replaces; optional fields default.
  cache.put({"cpu-x", "ragged_dot", kArgs, "cpu"}, make_entry(128, 1e-3, true));
  CHECK(cache.size() == 3);
  CHECK(cache.find({"cpu-x", "ragged_dot", kArgs, "cpu"})->config["tile_m"] == 128);
  const CacheEntry minimal = CacheEntry::from_json({{"config", json::object()}, {"time_s", 1}});
  CHECK(minimal.samples.empty());
  CHECK_FALSE(minimal.verified);
}

TEST_CASE("merge keeps the faster verified entry and reports conflicts", "[cache]") {
  const CacheKey key{"cpu-x", "ragged_dot", kArgs, "cpu"};
  AutotuneCache base = cache_of(key, make_entry(64, 2e-3, true));
  AutotuneCache faster = cache_of(key, make_entry(128, 1e-3, true));
  faster.put({"cpu-x", "ragged_dot", kArgs, "openblas"}, make_entry(0, 5e-3, true));
  std::vector<MergeConflict> conflicts = base.merge(faster);
  CHECK(base.size() == 2);
  CHECK(base.find(key)->config["tile_m"] == 128);
  REQUIRE(conflicts.size() == 1);
  CHECK(conflicts[0].key == key);
  CHECK(conflicts[0].kept_config["tile_m"] == 128);
  CHECK(conflicts[0].kept_time_s == 1e-3);
  CHECK(conflicts[0].dropped_config["tile_m"] == 64);
  CHECK(conflicts[0].dropped_time_s == 2e-3);

  // An unverified entry loses even when faster.
  conflicts = base.merge(cache_of(key, make_entry(16, 1e-4, false)));
  CHECK(base.find(key)->config["tile_m"] == 128);
  REQUIRE(conflicts.size() == 1);
  CHECK(conflicts[0].dropped_config["tile_m"] == 16);

  // ... and a verified one beats an unverified incumbent even when slower.
  AutotuneCache other = cache_of(key, make_entry(16, 1e-4, false));
  other.merge(cache_of(key, make_entry(32, 9e-3, true)));
  CHECK(other.find(key)->config["tile_m"] == 32);

  // Equal times: the newer timestamp wins. The same config re-measured is no conflict.
  conflicts = base.merge(cache_of(key, make_entry(256, 1e-3, true, "2027-05-01T00:00:00Z")));
  CHECK(base.find(key)->config["tile_m"] == 256);
  CHECK(conflicts.size() == 1);
  CHECK(base.merge(cache_of(key, make_entry(256, 0.5e-3, true))).empty());
  CHECK(base.find(key)->time_s == 0.5e-3);
}

TEST_CASE("filtered keeps the requested devices and ops", "[cache]") {
  AutotuneCache cache;
  cache.put({"cpu-x", "ragged_dot", kArgs, "cpu"}, make_entry(64, 1e-3, true));
  cache.put({"cpu-x", "ragged_dot_vjp", kArgs, "cpu"}, make_entry(64, 1e-3, true));
  cache.put({"cpu-y", "ragged_dot", kArgs, "cpu"}, make_entry(64, 1e-3, true));
  CHECK(cache.filtered({}, {}).size() == 3);
  CHECK(cache.filtered({"cpu-x"}, {}).size() == 2);
  CHECK(cache.filtered({}, {"ragged_dot"}).size() == 2);
  CHECK(cache.filtered({"cpu-x", "cpu-y"}, {"ragged_dot_vjp"}).size() == 1);
  CHECK(cache.filtered({"gpu"}, {}).empty());
}

TEST_CASE("a syntax error reports its line and column", "[cache]") {
  // Line 4: `    "cpu-x": x`, the bad literal at column 14.
  const std::string text =
      "{\n  \"format_version\": 1,\n  \"entries\": {\n    \"cpu-x\": x\n  }\n}\n";
  try {
    AutotuneCache::parse(text, "bad.json");
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.file() == "bad.json");
    CHECK(e.line() == 4);
    CHECK(e.column() == 14);
    CHECK_THAT(e.what(), Catch::StartsWith("bad.json:4:14: syntax error"));
  }
  // Truncated input points past the last character.
  try {
    AutotuneCache::parse("{\"format_version\": 1,\n\"entries\": {", "cut.json");
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.line() == 2);
    CHECK(e.column() == 13);
  }
}

TEST_CASE("a schema error names the JSON path", "[cache]") {
  // The what() of parsing `document`, which must fail with a schema error (no line/column).
  const auto error_of = [](const json& document) -> std::string {
    try {
      AutotuneCache::parse(document.dump(), "schema.json");
    } catch (const InputError& e) {
      CHECK(e.line() == 0);
      return e.what();
    }
    return "no error";
  };
  const auto with_entry = [](const json& entry) {
    return json{{"format_version", 1},
                {"entries", {{"cpu-x", {{"ragged_dot", {{"{}", {{"cpu", entry}}}}}}}}}};
  };
  json entry = make_entry(64, 1e-3, true).to_json();
  entry["time_s"] = "fast";
  CHECK_THAT(error_of(with_entry(entry)),
             Catch::StartsWith("schema.json: entries[\"cpu-x\"][\"ragged_dot\"][\"{}\"]"
                               "[\"cpu\"].time_s: expected a number"));
  entry = make_entry(64, 1e-3, true).to_json();
  entry["tile"] = 1;
  CHECK_THAT(error_of(with_entry(entry)), Catch::Contains("[\"cpu\"].tile: unknown field"));
  entry.erase("tile");
  entry.erase("config");
  CHECK_THAT(error_of(with_entry(entry)), Catch::Contains("[\"cpu\"].config: missing"));

  const json empty = json::object();
  CHECK_THAT(error_of({{"entries", empty}}), Catch::Contains("format_version: missing"));
  CHECK_THAT(error_of({{"format_version", "1"}, {"entries", empty}}),
             Catch::Contains("format_version: expected an integer"));
  CHECK_THAT(error_of({{"format_version", 2}, {"entries", empty}}),
             Catch::Contains("format_version: 2 is newer"));
  CHECK_THAT(error_of({{"format_version", 0}, {"entries", empty}}),
             Catch::Contains("format_version: 0 is not a known"));
  CHECK_THAT(error_of({{"format_version", 1}, {"entries", json::array()}}),
             Catch::Contains("entries: expected an object"));
  CHECK_THAT(error_of({{"format_version", 1}, {"entries", {{"cpu-x", {{"op", 3}}}}}}),
             Catch::Contains("entries[\"cpu-x\"][\"op\"]: expected an object"));
}

TEST_CASE("load, save and update_file on disk", "[cache]") {
  TempDir dir;
  CHECK(AutotuneCache::load(dir.file("missing.json")).empty());
  CHECK_THROWS_AS(AutotuneCache::load(dir.path().string()), InputError);

  const std::string path = dir.file("nested/deeper/cache.json");
  AutotuneCache::update_file(path, [](AutotuneCache& cache) {
    cache.put({"cpu-x", "ragged_dot", kArgs, "cpu"}, make_entry(64, 1e-3, true));
  });
  const AutotuneCache loaded = AutotuneCache::load(path);
  CHECK(loaded.size() == 1);
  CHECK(read_text(path) == loaded.dump());

  // A corrupt file: update_file throws, writes nothing and leaves no temporary behind.
  const std::string corrupt = dir.file("corrupt.json");
  const std::string garbage = "{\"format_version\": 1, \"entries\": {\"cpu\": ";
  write_text(corrupt, garbage);
  bool mutated = false;
  CHECK_THROWS_AS(AutotuneCache::update_file(corrupt, [&](AutotuneCache&) { mutated = true; }),
                  InputError);
  CHECK_FALSE(mutated);
  CHECK(read_text(corrupt) == garbage);
  for (const auto& file : fs::directory_iterator(dir.path())) {
    CHECK(file.path().filename().string().find(".tmp.") == std::string::npos);
  }
}

TEST_CASE("concurrent writers lose no entries", "[cache]") {
  TempDir dir;
  const std::string path = dir.file("shared.json");
  constexpr int kWriters = 4;
  constexpr int kUpdates = 20;
  std::fflush(nullptr);  // or the children flush the parent's buffered output again
  std::vector<pid_t> children;
  for (int writer = 0; writer < kWriters; ++writer) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int status = 0;
      try {
        for (int i = 0; i < kUpdates; ++i) {
          AutotuneCache::update_file(path, [&](AutotuneCache& cache) {
            const std::string args =
                "{\"writer\":" + std::to_string(writer) + ",\"i\":" + std::to_string(i) + "}";
            cache.put({"cpu-x", "ragged_dot", args, "cpu"}, make_entry(i, 1e-3, true));
          });
        }
      } catch (...) {
        status = 1;
      }
      ::_exit(status);  // skip Catch2's and the parent's atexit handlers
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  CHECK(AutotuneCache::load(path).size() == size_t{kWriters} * kUpdates);
}

TEST_CASE("default_user_cache_path honours XDG_CACHE_HOME", "[cache]") {
  const char* saved = std::getenv("XDG_CACHE_HOME");
  const std::optional<std::string> previous =
      saved ? std::optional<std::string>(saved) : std::nullopt;
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg-test", 1);
  CHECK(default_user_cache_path() == "/tmp/xdg-test/tokamax/autotuning.json");
  ::setenv("XDG_CACHE_HOME", "relative/ignored", 1);
  CHECK(default_user_cache_path().find("relative") == std::string::npos);
  ::unsetenv("XDG_CACHE_HOME");
  if (const char* home = std::getenv("HOME")) {
    CHECK(default_user_cache_path() == std::string(home) + "/.cache/tokamax/autotuning.json");
  }
  if (previous) {
    ::setenv("XDG_CACHE_HOME", previous->c_str(), 1);
  }
}

TEST_CASE("the shipped cache parses and follows its layout", "[cache]") {
  for (const auto& [key, entry] : shipped_cache().entries()) {
    CHECK_FALSE(key.device.empty());
    CHECK(entry.time_s >= 0);
  }
}

TEST_CASE("export-cache merges, filters and writes the shipped layout", "[cache]") {
  TempDir dir;
  const CacheKey key{"cpu-x", "ragged_dot", kArgs, "cpu"};
  AutotuneCache a;
  a.put(key, make_entry(64, 2e-3, true));
  a.put({"cpu-y", "ragged_dot", kArgs, "cpu"}, make_entry(64, 2e-3, true));
  a.save(dir.file("a.json"));
  AutotuneCache b;
  b.put(key, make_entry(128, 1e-3, true));
  b.put({"cpu-x", "ragged_dot_vjp", kArgs, "cpu"}, make_entry(8, 1e-3, true));
  b.save(dir.file("b.json"));

  const std::string caches = " --cache " + dir.file("a.json") + " --cache " + dir.file("b.json");
  CHECK(run_export_cache("export-cache" + caches + " --device cpu-x --out-dir " +
                         dir.file("out")) == cli::kExitOk);
  const AutotuneCache shipped = AutotuneCache::load(dir.file("out/cpu-x/ragged_dot.json"));
  CHECK(shipped.size() == 1);
  CHECK(shipped.find(key)->config["tile_m"] == 128);
  CHECK(AutotuneCache::load(dir.file("out/cpu-x/ragged_dot_vjp.json")).size() == 1);
  CHECK_FALSE(fs::exists(dir.file("out/cpu-y")));

  CHECK(run_export_cache("export-cache" + caches + " --op ragged_dot -o " + dir.file("o.json")) ==
        cli::kExitOk);
  CHECK(AutotuneCache::load(dir.file("o.json")).size() == 2);

  CHECK_THROWS_WITH(run_export_cache("export-cache" + caches + " --device gpu-z -o x.json"),
                    Catch::Contains("cpu-x, cpu-y") && Catch::Contains("ragged_dot_vjp"));
  CHECK_THROWS_AS(run_export_cache("export-cache --cache " + dir.file("nope.json")),
                  InvalidArgument);
  write_text(dir.file("bad.json"), "{");
  CHECK_THROWS_AS(run_export_cache("export-cache --cache " + dir.file("bad.json")), InputError);
}
