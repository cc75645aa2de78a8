// Failure isolation end to end: tune, verify and bench with an implementation that crashes, hangs,
// throws or computes wrong numbers (tokamax_test_cli's fault_injection op).
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

using namespace tokamax::testing;
using nlohmann::json;

namespace {

const std::string kTestCli = TOKAMAX_TEST_CLI;
const std::string kBin = TOKAMAX_BIN;

// One small fault_injection case (ragged_dot math, a few kFLOP).
std::string write_spec(const ScratchDir& dir) {
  const std::string path = dir.file("faults.yaml");
  write_file(path,
             "op: fault_injection\nspecs:\n  - name: tiny\n    tags: [faults]\n    args:\n"
             "      lhs: f32[24,16]\n      rhs: f32[3,16,8]\n      group_sizes: [10, 0, 9]\n");
  return path;
}

CommandResult run_test_cli(const std::string& env, const std::string& args) {
  return run_command(env + " " + kTestCli + " " + args);
}

}  // namespace

TEST_CASE("tune records crash, timeout, numerics, invalid and error candidates and still wins",
          "[isolation]") {
  ScratchDir dir;
  const std::string spec = write_spec(dir);
  const CommandResult r = run_test_cli(
      "", "tune --spec " + spec + " --op fault_injection --impl faulty --quiet --min-time 0.005" +
              " --candidate-timeout 2 --cache " + dir.file("cache.json") + " --json " +
              dir.file("tune.json"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("invalid 1, error 1, crash 3, timeout 1, numerics 1"));
  CHECK_THAT(r.output, Catch::Contains("1 tuned"));
  const json tune = json::parse(read_file(dir.file("tune.json")));
  REQUIRE(tune["results"].size() == 1);
  const json& result = tune["results"][0];
  CHECK(result["config"] == json({{"mode", "ok"}, {"delay_us", 200}}));
  std::map<std::string, std::string> status_of_mode;
  for (const json& c : result["candidates"]) {
    status_of_mode[c["config"]["mode"].get<std::string>()] = c["status"].get<std::string>();
    if (c["status"] != "ok") CHECK(!c["reason"].get<std::string>().empty());
  }
  CHECK(status_of_mode == std::map<std::string, std::string>{{"ok", "ok"},
                                                             {"wrong", "numerics"},
                                                             {"throw", "error"},
                                                             {"crash", "crash"},
                                                             {"abort", "crash"},
                                                             {"device_fault", "crash"},
                                                             {"hang", "timeout"},
                                                             {"invalid", "invalid"}});
  // The winner is in the cache.
  const json cache = json::parse(read_file(dir.file("cache.json")));
  CHECK(cache.dump().find("\"faulty\"") != std::string::npos);
}

TEST_CASE("verify reports a crashing or hanging implementation and verifies the others",
          "[isolation]") {
  ScratchDir dir;
  const std::string spec = write_spec(dir);
  const std::string verify = "verify --spec " + spec + " --op fault_injection --json " +
                             dir.file("v.json") + " --run-timeout 2";
  for (const char* fault : {"crash", "hang", "wrong", "throw", "device_fault"}) {
    const CommandResult r = run_test_cli(std::string("TOKAMAX_FAULT=") + fault, verify);
    INFO(fault << ": " << r.output);
    CHECK(r.exit_code == 1);
    const json v = json::parse(read_file(dir.file("v.json")));
    std::map<std::string, json> by_impl;
    for (const json& c : v["cases"]) by_impl[c["impl"].get<std::string>()] = c;
    CHECK(by_impl["steady"]["disposition"] == "passed");
    CHECK(by_impl["faulty"]["disposition"] == "failed");
    const std::map<std::string, std::string> expected = {{"crash", "crash"},
                                                         {"hang", "timeout"},
                                                         {"wrong", "numerics"},
                                                         {"throw", "error"},
                                                         {"device_fault", "crash"}};
    CHECK(by_impl["faulty"]["failure"] == expected.at(fault));
    if (std::string(fault) == "device_fault") {
      // The worker reports the device's error and exits; the next implementation runs in a
      // fresh one.
      CHECK_THAT(by_impl["faulty"].dump(),
                 Catch::Contains("device fault: injected: cudaErrorIllegalAddress"));
    }
    CHECK_THAT(r.output, Catch::Contains("1 passed, 1 failed (1 " + expected.at(fault) + ")"));
  }
  const CommandResult fine = run_test_cli("", verify);
  INFO(fine.output);
  CHECK(fine.exit_code == 0);
  CHECK_THAT(fine.output, Catch::Contains("2 passed, 0 failed"));
  // In-process (for debuggers) gives the same verdicts where the process survives.
  const CommandResult local = run_test_cli("TOKAMAX_FAULT=wrong", verify + " --isolation none");
  INFO(local.output);
  CHECK(local.exit_code == 1);
  CHECK_THAT(local.output, Catch::Contains("1 passed, 1 failed (1 numerics)"));
  // In-process, a device fault ends the command: nothing more can run on that device.
  const CommandResult lost =
      run_test_cli("TOKAMAX_FAULT=device_fault", verify + " --isolation none");
  INFO(lost.output);
  CHECK(lost.exit_code == 1);
  CHECK_THAT(lost.output, Catch::Contains("cudaErrorIllegalAddress"));
}

TEST_CASE("bench reports a crashing implementation and measures the others", "[isolation]") {
  ScratchDir dir;
  const std::string spec = write_spec(dir);
  // With --rounds the implementations share one worker request; when it dies, each is rerun
  // alone, so the crash still lands on its own row.
  for (const int rounds : {1, 2}) {
    INFO("rounds " << rounds);
    const CommandResult r = run_test_cli(
        "TOKAMAX_FAULT=crash", "bench --spec " + spec +
                                   " --op fault_injection --repetitions 2 --min-time 0.001 "
                                   "--rounds " +
                                   std::to_string(rounds) + " --json " + dir.file("b.json"));
    INFO(r.output);
    CHECK(r.exit_code == 1);  // a failed benchmark
    CHECK_THAT(r.output, Catch::Contains("failed: crash: killed by signal 11 (SIGSEGV)") &&
                             Catch::Contains("2 benchmarks, 1 failed"));
    const json b = json::parse(read_file(dir.file("b.json")));
    std::map<std::string, json> by_impl;
    for (const json& c : b["tokamax"]["cases"]) by_impl[c["impl"].get<std::string>()] = c;
    CHECK(by_impl["faulty"]["ok"] == false);
    CHECK(by_impl["faulty"]["failure"] == "crash");
    CHECK(by_impl["steady"]["ok"] == true);
    CHECK(by_impl["steady"]["failure"] == "");
    CHECK(by_impl["steady"]["samples_s"].size() == static_cast<size_t>(2 * rounds));
    CHECK(by_impl["steady"]["round_medians_s"].size() == static_cast<size_t>(rounds));
    CHECK(by_impl["steady"]["median_s"].get<double>() > 0);
    // Google Benchmark's JSON: the steady repetitions and the crash as a skipped benchmark.
    bool crash_entry = false, steady_entry = false;
    for (const json& e : b["benchmarks"]) {
      if (e["name"] == "fault_injection/tiny/faulty") {
        crash_entry = e.value("error_occurred", false);
      }
      if (e["name"] == "fault_injection/tiny/steady") steady_entry = true;
    }
    CHECK(crash_entry);
    CHECK(steady_entry);
  }
}

TEST_CASE("the installed tokamax has no fault_injection op and hides the worker command",
          "[isolation]") {
  const CommandResult list = run_command(kBin + " list");
  CHECK(list.exit_code == 0);
  CHECK_THAT(list.output, !Catch::Contains("fault_injection"));
  const CommandResult help = run_command(kBin + " --help");
  // As a word: the usage line holds the program's path, which may (wt-workers/build/tokamax).
  CHECK_THAT(help.output, !Catch::Contains(" worker ") && !Catch::Contains("Internal: run"));
  const CommandResult test_list = run_command(kTestCli + " list");
  CHECK_THAT(test_list.output, Catch::Contains("fault_injection"));
}
