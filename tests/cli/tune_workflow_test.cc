// `tokamax tune` at scale, end to end: resume from the cache, --shard, and TOKAMAX_RECORD ->
// --from.
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "tests/test_util.h"

using namespace tokamax::testing;
using nlohmann::json;

namespace {

const std::string kExample =
    (std::filesystem::path(TOKAMAX_BIN).parent_path() / "ragged_dot_example").string();
const std::string kFast = " --impl cpu --min-time 0.005 --quiet ";

// "device|op|args key|impl" of every entry of a cache file.
std::set<std::string> cache_keys(const std::string& path) {
  std::set<std::string> keys;
  const json cache = json::parse(read_file(path));
  for (const auto& [device, ops] : cache["entries"].items()) {
    for (const auto& [op, cases] : ops.items()) {
      for (const auto& [args, impls] : cases.items()) {
        for (const auto& [impl, entry] : impls.items()) {
          keys.insert(device + "|" + op + "|" + args + "|" + impl);
        }
      }
    }
  }
  return keys;
}

}  // namespace

TEST_CASE("tune skips entries already in the cache unless --force", "[tune_workflow]") {
  ScratchDir dir;
  const std::string tune = "tune --op ragged_dot --name smoke_f32 --cache " + dir.file("c.json");
  const CommandResult first = run_tokamax(tune + kFast);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.output, Catch::Contains("1 tuned, 0 cached"));
  const std::string tuned_cache = read_file(dir.file("c.json"));

  const CommandResult again = run_tokamax(tune + kFast);
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains("cached") && Catch::Contains("0 tuned, 1 cached"));
  CHECK(read_file(dir.file("c.json")) == tuned_cache);  // untouched

  const CommandResult forced = run_tokamax(tune + kFast + "--force");
  INFO(forced.output);
  CHECK(forced.exit_code == 0);
  CHECK_THAT(forced.output, Catch::Contains("1 tuned, 0 cached"));
  CHECK(cache_keys(dir.file("c.json")).size() == 1);

  // A larger selection after an interrupted run tunes only what is missing.
  const CommandResult wider = run_tokamax(tune + " --name smoke_f16" + kFast);
  INFO(wider.output);
  CHECK(wider.exit_code == 0);
  CHECK_THAT(wider.output, Catch::Contains("1 tuned, 1 cached"));
  CHECK(cache_keys(dir.file("c.json")).size() == 2);
}

TEST_CASE("tune --shard I/N partitions the selection", "[tune_workflow]") {
  ScratchDir dir;
  const std::string select = "tune --op ragged_dot --tag smoke" + kFast;
  REQUIRE(run_tokamax(select + "--cache " + dir.file("full.json")).exit_code == 0);
  REQUIRE(run_tokamax(select + "--shard 0/2 --cache " + dir.file("s0.json")).exit_code == 0);
  REQUIRE(run_tokamax(select + "--shard 1/2 --cache " + dir.file("s1.json")).exit_code == 0);
  const std::set<std::string> full = cache_keys(dir.file("full.json"));
  const std::set<std::string> s0 = cache_keys(dir.file("s0.json"));
  const std::set<std::string> s1 = cache_keys(dir.file("s1.json"));
  CHECK(full.size() >= 2);  // the smoke tag has one case per dtype
  CHECK(!s0.empty());
  CHECK(!s1.empty());
  std::set<std::string> both = s0;
  both.insert(s1.begin(), s1.end());
  CHECK(both.size() == s0.size() + s1.size());  // disjoint
  CHECK(both == full);

  // The shards merge into the full run's set of entries.
  const CommandResult merged =
      run_tokamax("export-cache --cache " + dir.file("s0.json") + " --cache " +
                  dir.file("s1.json") + " -o " + dir.file("merged.json"));
  INFO(merged.output);
  CHECK(merged.exit_code == 0);
  CHECK(cache_keys(dir.file("merged.json")) == full);

  for (const char* bad : {"2/2", "-1/2", "1", "a/b", "0/0", "1/2/3"}) {
    const CommandResult r =
        run_tokamax(select + "--shard " + bad + " --cache " + dir.file("bad.json"));
    INFO(bad << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains("--shard") && Catch::Contains("0 <= I < N"));
  }
  CHECK(!std::filesystem::exists(dir.file("bad.json")));
}

TEST_CASE("TOKAMAX_RECORD from an application feeds tune --from", "[tune_workflow]") {
  ScratchDir dir;
  const std::string calls = dir.file("calls.jsonl");
  const CommandResult app = run_command("TOKAMAX_RECORD=" + calls + " " + kExample);
  INFO(app.output);
  REQUIRE(app.exit_code == 0);
  std::istringstream lines(read_file(calls));
  std::string line;
  std::string first_line;
  int count = 0;
  while (std::getline(lines, line)) {
    if (first_line.empty()) first_line = line;
    const json record = json::parse(line);
    CHECK(record["op"] == "ragged_dot");
    ++count;
  }
  CHECK(count == 4);  // four calls, one shape repeated

  const CommandResult tune =
      run_tokamax("tune --from " + calls + kFast + "--cache " + dir.file("app.json"));
  INFO(tune.output);
  CHECK(tune.exit_code == 0);
  CHECK_THAT(tune.output, Catch::Contains("3 tuned"));
  CHECK(cache_keys(dir.file("app.json")).size() == 3);
  // The second run resumes: everything is cached.
  const CommandResult again =
      run_tokamax("tune --from " + calls + kFast + "--cache " + dir.file("app.json"));
  CHECK_THAT(again.output, Catch::Contains("0 tuned, 3 cached"));

  write_file(dir.file("bad.jsonl"), first_line + "\n{\"op\": \"ragged_dot\"}\n");
  const CommandResult bad = run_tokamax("tune --from " + dir.file("bad.jsonl") + kFast +
                                        "--cache " + dir.file("other.json"));
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Catch::Contains(dir.file("bad.jsonl") + ":2:"));
  const CommandResult mixed = run_tokamax("tune --from " + calls + " --tag smoke" + kFast);
  CHECK(mixed.exit_code == 2);
  CHECK_THAT(mixed.output, Catch::Contains("--from"));
}

TEST_CASE("the VJP ops tune, export and bench from the cache like forward ops",
          "[tune_workflow]") {
  ScratchDir dir;
  const CommandResult tune = run_tokamax(
      "tune --op ragged_dot_vjp --op gated_linear_unit_vjp --op layer_norm_vjp --tag smoke" +
      kFast + "--cache " + dir.file("c.json"));
  INFO(tune.output);
  REQUIRE(tune.exit_code == 0);
  std::set<std::string> ops;
  for (const std::string& key : cache_keys(dir.file("c.json"))) {
    ops.insert(key.substr(key.find('|') + 1, key.find('|', key.find('|') + 1) - key.find('|') - 1));
  }
  CHECK(ops == std::set<std::string>{"gated_linear_unit_vjp", "layer_norm_vjp", "ragged_dot_vjp"});

  const CommandResult exported = run_tokamax("export-cache --cache " + dir.file("c.json") +
                                             " --op ragged_dot_vjp -o " + dir.file("e.json"));
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  for (const std::string& key : cache_keys(dir.file("e.json"))) {
    CHECK(key.find("|ragged_dot_vjp|") != std::string::npos);
  }
  const CommandResult bench =
      run_tokamax("bench --op ragged_dot_vjp --name smoke_f32 --impl cpu --repetitions 2 --cache " +
                  dir.file("e.json"));
  INFO(bench.output);
  CHECK(bench.exit_code == 0);
  // The row's config source column: the exported cache, not the heuristics.
  std::istringstream rows(bench.output);
  std::string row;
  bool found = false;
  while (std::getline(rows, row)) {
    if (row.rfind("ragged_dot_vjp", 0) != 0) continue;
    found = true;
    CHECK_THAT(row, Catch::Contains("  cache  "));
  }
  CHECK(found);

  // A recorded call of a VJP op feeds tune --from.
  const std::string calls = dir.file("calls.jsonl");
  const json args = {{"lhs", "f32[16,8]"},
                     {"rhs", "f32[2,8,12]"},
                     {"group_sizes", {6, 10}},
                     {"preferred_element_type", "f32"},
                     {"dout", "f32[16,12]"}};
  write_file(calls, json{{"op", "ragged_dot_vjp"}, {"args", args}}.dump() + "\n");
  const CommandResult from =
      run_tokamax("tune --from " + calls + kFast + "--cache " + dir.file("app.json"));
  INFO(from.output);
  CHECK(from.exit_code == 0);
  CHECK_THAT(from.output, Catch::Contains("1 tuned"));
}
