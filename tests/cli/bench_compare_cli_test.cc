// End-to-end tests of `tokamax bench --compare OLD NEW` on synthetic Google Benchmark JSON files.
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

using namespace tokamax::testing;
using nlohmann::json;

namespace {

// A `bench --json` file as Google Benchmark writes it: per case its repetitions (in us) and the
// median aggregate, which the comparison must ignore.
std::string bench_json(const std::map<std::string, std::vector<double>>& cases) {
  json benchmarks = json::array();
  for (const auto& [name, times_us] : cases) {
    for (size_t i = 0; i < times_us.size(); ++i) {
      benchmarks.push_back({{"name", name},
                            {"run_name", name},
                            {"run_type", "iteration"},
                            {"repetitions", times_us.size()},
                            {"repetition_index", i},
                            {"iterations", 100},
                            {"real_time", times_us[i]},
                            {"cpu_time", times_us[i]},
                            {"time_unit", "us"}});
    }
    benchmarks.push_back({{"name", name + "_median"},
                          {"run_name", name},
                          {"run_type", "aggregate"},
                          {"aggregate_name", "median"},
                          {"real_time", 1e9},
                          {"time_unit", "us"}});
  }
  return json{{"context", {{"host_name", "test"}}}, {"benchmarks", benchmarks}}.dump(2);
}

const std::vector<double> kBase = {100, 101, 99, 100, 102};

}  // namespace

TEST_CASE("bench --compare reports verdicts, one-sided cases and exits 1 on a slowdown",
          "[bench_compare][cli]") {
  ScratchDir dir;
  write_file(dir.file("old.json"), bench_json({{"ragged_dot/a/cpu", kBase},
                                               {"ragged_dot/b/cpu", kBase},
                                               {"ragged_dot/gone/cpu", kBase}}));
  write_file(dir.file("new.json"), bench_json({{"ragged_dot/a/cpu", {120, 121, 119, 120, 122}},
                                               {"ragged_dot/b/cpu", {100, 100, 101, 99, 102}},
                                               {"ragged_dot/added/cpu", kBase}}));
  const CommandResult r = run_tokamax("bench --compare " + dir.file("old.json") + " " +
                                      dir.file("new.json") + " --json " + dir.file("cmp.json"));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output,
             Catch::Contains("| case | old median | new median | change | noise | p-value |") &&
                 Catch::Contains("| ragged_dot/a/cpu | 100.00 us | 120.00 us | +20.0% |") &&
                 Catch::Contains("| SLOWER |") && Catch::Contains("| SAME |") &&
                 Catch::Contains("1 slower, 0 faster, 1 same") &&
                 Catch::Contains("only in old: `ragged_dot/gone/cpu`") &&
                 Catch::Contains("only in new: `ragged_dot/added/cpu`"));
  const json report = json::parse(read_file(dir.file("cmp.json")));
  CHECK(report["schema_version"] == 1);
  CHECK(report["threshold"] == 0.05);
  REQUIRE(report["cases"].size() == 2);
  const json& a = report["cases"][0];
  CHECK(a["name"] == "ragged_dot/a/cpu");
  CHECK(a["verdict"] == "SLOWER");
  // kBase ties (100 twice): normal approximation; reference value from the script in
  // tests/cli/report/bench_compare_test.cc (scipy.stats.mannwhitneyu's asymptotic formula).
  CHECK(a["test"] == "normal");
  CHECK(a["p_value"].get<double>() == Approx(0.011667312343319398).epsilon(1e-9));
  CHECK(a["old_median_s"].get<double>() == Approx(100e-6));
  for (const char* key : {"new_median_s", "change", "noise", "u", "z", "test", "reason"}) {
    INFO(key);
    CHECK(a.contains(key));
  }
  CHECK(report["cases"][1]["verdict"] == "SAME");
  CHECK(report["only_in_old"] == json::array({"ragged_dot/gone/cpu"}));
  CHECK(report["only_in_new"] == json::array({"ragged_dot/added/cpu"}));

  SECTION("a faster run or a higher threshold exits 0") {
    const CommandResult reverse =
        run_tokamax("bench --compare " + dir.file("new.json") + " " + dir.file("old.json"));
    CHECK(reverse.exit_code == 0);
    CHECK_THAT(reverse.output, Catch::Contains("| FASTER |") && Catch::Contains("-16.7%"));
    const CommandResult loose = run_tokamax("bench --compare " + dir.file("old.json") + " " +
                                            dir.file("new.json") + " --threshold 25%");
    CHECK(loose.exit_code == 0);
    CHECK_THAT(loose.output, Catch::Contains("0 slower") && Catch::Contains("threshold 25.0%"));
  }
}

TEST_CASE("bench --compare rejects missing, corrupt files and bad options with exit 2",
          "[bench_compare][cli]") {
  ScratchDir dir;
  write_file(dir.file("old.json"), bench_json({{"ragged_dot/a/cpu", kBase}}));
  write_file(dir.file("corrupt.json"), "{\"benchmarks\": [ {\"name\": ");
  const CommandResult missing =
      run_tokamax("bench --compare " + dir.file("old.json") + " " + dir.file("nope.json"));
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Catch::Contains(dir.file("nope.json")));
  const CommandResult corrupt =
      run_tokamax("bench --compare " + dir.file("corrupt.json") + " " + dir.file("old.json"));
  CHECK(corrupt.exit_code == 2);
  CHECK_THAT(corrupt.output, Catch::Contains(dir.file("corrupt.json")));
  const std::string both = dir.file("old.json") + " " + dir.file("old.json");
  CHECK(run_tokamax("bench --compare " + both + " --threshold 5").exit_code == 2);
  CHECK(run_tokamax("bench --compare " + dir.file("old.json")).exit_code == 2);
  CHECK(run_tokamax("bench --threshold 5%").exit_code == 2);
  CHECK(run_tokamax("bench --compare " + both).exit_code == 0);
}

TEST_CASE("bench --compare reads a real bench --json file", "[bench_compare][cli]") {
  ScratchDir dir;
  const CommandResult bench = run_tokamax(
      "bench --op ragged_dot --name smoke_f32 --impl reference --repetitions 4 "
      "--min-time 0.001 --json " +
      dir.file("run.json"));
  INFO(bench.output);
  REQUIRE(bench.exit_code == 0);
  const CommandResult r =
      run_tokamax("bench --compare " + dir.file("run.json") + " " + dir.file("run.json"));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("| ragged_dot/smoke_f32/reference |") &&
                           Catch::Contains("| +0.0% |") && Catch::Contains("| 1.000 | SAME |") &&
                           Catch::Contains("0 slower, 0 faster, 1 same"));
}
