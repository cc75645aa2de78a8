// End-to-end tests of what verify, bench and tune select by default (the smoke set, with a line
// on how to widen it), of --spec alone and --all, and of verify's skip of a portable reference
// that would outlast the run timeout.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "cli/toolkit/catalog/arg_spec.h"
#include "tests/test_util.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

using CaseSet = std::set<std::pair<std::string, std::string>>;  // (op, spec)

CaseSet smoke_set() {
  CaseSet out;
  for (const ArgSpec& spec : builtin_specs()) {
    for (const std::string& tag : spec.tags) {
      if (tag == "smoke") out.insert({spec.op, spec.name});
    }
  }
  return out;
}

CaseSet cases_of(const json& document, const char* key) {
  CaseSet out;
  for (const json& c : document.at(key)) {
    out.insert({c.at("op").get<std::string>(), c.at("spec").get<std::string>()});
  }
  return out;
}

}  // namespace

TEST_CASE("verify and bench run the smoke set by default and say how to widen it", "[cli]") {
  ScratchDir dir;
  const CommandResult verify = run_tokamax("verify --impl cpu --json " + dir.file("v.json"));
  INFO(verify.output);
  REQUIRE(verify.exit_code == 0);
  CHECK_THAT(verify.output, Catch::Contains("verify: the smoke set") && Catch::Contains("--all") &&
                                Catch::Contains("--tag ci_tests"));
  CHECK(cases_of(json::parse(read_file(dir.file("v.json"))), "cases") == smoke_set());
  CHECK_THAT(verify.output, !Catch::Contains("[case "));  // progress only on a terminal

  const CommandResult bench = run_tokamax(
      "bench --impl cpu --min-samples 1 --min-time 0 --max-samples 1 --json " + dir.file("b.json"));
  INFO(bench.output);
  REQUIRE(bench.exit_code == 0);
  CHECK_THAT(bench.output, Catch::Contains("bench: the smoke set"));
  CHECK(cases_of(json::parse(read_file(dir.file("b.json"))).at("tokamax"), "cases") == smoke_set());

  // A filter replaces the default, and says nothing about it.
  const CommandResult filtered = run_tokamax("verify --impl cpu --op layer_norm --tag ci_tests");
  REQUIRE(filtered.exit_code == 0);
  CHECK_THAT(filtered.output, !Catch::Contains("the smoke set"));
}

TEST_CASE("tune runs the smoke set by default, and --from refuses --all", "[cli]") {
  ScratchDir dir;
  // The portable reference has nothing to tune: the selection shows without timing anything.
  const CommandResult tune = run_tokamax("tune --impl reference --cache " + dir.file("c.json"));
  INFO(tune.output);
  REQUIRE(tune.exit_code == 0);
  CHECK_THAT(
      tune.output,
      Catch::Contains("tune: the smoke set: " + std::to_string(smoke_set().size()) + " specs"));
  CHECK_THAT(tune.output, Catch::Contains("nothing to tune"));
  CHECK_THAT(tune.output, !Catch::Contains("mixtral"));  // a primary ragged_dot shape
  const CommandResult from = run_tokamax("tune --all --from " + dir.file("c.json"));
  CHECK(from.exit_code == 2);
  CHECK_THAT(from.output, Catch::Contains("--all"));
}

TEST_CASE("a --spec file alone selects its own specs, and --all every spec", "[cli]") {
  ScratchDir dir;
  {
    std::ofstream(dir.file("mine.yaml")) << "op: layer_norm\n"
                                            "specs:\n"
                                            "  - name: mine_a\n"
                                            "    args: {x: \"f32[4,32]\"}\n"
                                            "  - name: mine_b\n"
                                            "    args: {x: \"f32[8,16]\"}\n";
  }
  const CommandResult own = run_tokamax("verify --impl cpu --spec " + dir.file("mine.yaml") +
                                        " --json " + dir.file("v.json"));
  INFO(own.output);
  REQUIRE(own.exit_code == 0);
  CHECK(cases_of(json::parse(read_file(dir.file("v.json"))), "cases") ==
        CaseSet{{"layer_norm", "mine_a"}, {"layer_norm", "mine_b"}});
  // With a filter the builtin catalog joins them.
  const CommandResult joined =
      run_tokamax("list --spec " + dir.file("mine.yaml") + " --op layer_norm --name 'mine_*'");
  CHECK_THAT(joined.output, Catch::Contains("mine_a") && Catch::Contains("mine_b"));
  const CommandResult all = run_tokamax("list --all");
  REQUIRE(all.exit_code == 0);
  CHECK_THAT(all.output, Catch::Contains("primary") && Catch::Contains("ci_tests"));
}

TEST_CASE("verify skips a portable reference that would outlast --run-timeout, unless named",
          "[cli]") {
  ScratchDir dir;
  // 2 * 1536^3 = 7 GFLOP: seconds for the reference, far over a 0.3 s run timeout.
  {
    std::ofstream(dir.file("big.yaml")) << "op: ragged_dot\n"
                                           "specs:\n"
                                           "  - name: big\n"
                                           "    args: {lhs: \"f32[1536,1536]\", "
                                           "rhs: \"f32[1,1536,1536]\"}\n";
  }
  const CommandResult skipped =
      run_tokamax("verify --spec " + dir.file("big.yaml") + " --impl cpu,reference" +
                  " --run-timeout 0.3 --isolation none --json " + dir.file("v.json"));
  INFO(skipped.output);
  // Named: --impl reference runs it whatever the estimate.
  const json named = json::parse(read_file(dir.file("v.json")));
  CHECK(named.at("summary").value("skipped", 0) == 0);
  CHECK(named.at("summary").value("passed", 0) == 2);

  const CommandResult by_default =
      run_tokamax("verify --spec " + dir.file("big.yaml") +
                  " --run-timeout 0.3 --isolation none --json " + dir.file("d.json"));
  INFO(by_default.output);
  REQUIRE(by_default.exit_code == 0);
  const json d = json::parse(read_file(dir.file("d.json")));
  bool seen = false;
  for (const json& c : d.at("cases")) {
    if (c.at("impl") != "reference") continue;
    seen = true;
    CHECK(c.at("disposition") == "skipped");
    CHECK_THAT(c.at("reason").get<std::string>(), Catch::Contains("would take about"));
  }
  CHECK(seen);
  CHECK_THAT(by_default.output, Catch::Contains("1 skipped"));
}
