// `tune` with workers killed from outside: setup and oracle retried once in a fresh worker, a case
// lost only when its worker dies twice; OOM-killed, SIGTERM-ignoring and pipe-closing candidates
// are named failures and the run goes on (tokamax_test_cli's fault_injection op).
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

using namespace tokamax::testing;
using nlohmann::json;

namespace {

const std::string kTestCli = TOKAMAX_TEST_CLI;
const std::string kSigkill = "killed by signal 9 (SIGKILL: the OOM killer or kill -9)";

// Two small fault_injection cases, tuned in this order (a_first, b_second).
std::string write_spec(const ScratchDir& dir) {
  const std::string path = dir.file("faults.yaml");
  write_file(path,
             "op: fault_injection\nspecs:\n"
             "  - name: a_first\n    args:\n      lhs: f32[24,16]\n      rhs: f32[3,16,8]\n"
             "      group_sizes: [10, 0, 9]\n"
             "  - name: b_second\n    args:\n      lhs: f32[16,16]\n      rhs: f32[2,16,8]\n"
             "      group_sizes: [7, 9]\n");
  return path;
}

// tune over both cases, the heuristics config and one other (the right one) per case.
CommandResult tune(const ScratchDir& dir, const std::string& env) {
  return run_command(env + " " + kTestCli + " tune --spec " + write_spec(dir) +
                     " --op fault_injection --impl faulty --quiet --min-time 0.002"
                     " --max-evals 2 --candidate-timeout 1 --cache " +
                     dir.file("cache.json") + " --json " + dir.file("tune.json"));
}

// The --json results by spec name.
std::map<std::string, json> results_by_spec(const ScratchDir& dir) {
  std::map<std::string, json> results;
  const json document = json::parse(read_file(dir.file("tune.json")));
  for (const json& r : document["results"]) {
    results[r["spec"].get<std::string>()] = r;
  }
  return results;
}

// The heuristics candidate of a result.
json heuristics_candidate(const json& result) {
  for (const json& c : result["candidates"]) {
    if (c.value("heuristics", false)) return c;
  }
  return json();
}

}  // namespace

TEST_CASE("tune retries a setup or an oracle whose worker was killed, once", "[isolation]") {
  for (const char* step : {"setup", "oracle"}) {
    const std::string what =
        std::string(step) == "setup" ? "setting up the case" : "computing the oracle";
    ScratchDir dir;
    const std::string kill =
        std::string("TOKAMAX_FAULT_KILL=") + step + " TOKAMAX_FAULT_KILL_FILE=" + dir.file("kills");
    const CommandResult once = tune(dir, kill);
    INFO(step << ": " << once.output);
    CHECK(once.exit_code == 0);
    CHECK_THAT(once.output,
               Catch::Contains("fault_injection/a_first/faulty: the worker died " + what + " (" +
                               kSigkill + "); retried in a fresh worker"));
    CHECK_THAT(once.output, Catch::Contains("2 tuned, 0 cached"));
    std::map<std::string, json> results = results_by_spec(dir);
    CHECK(results["a_first"]["retries"].size() == 1);
    CHECK(results["b_second"]["retries"].empty());
    CHECK(results["b_second"]["config"] == json({{"mode", "ok"}, {"delay_us", 200}}));

    // Killed again in the fresh worker: that case fails, the next one is tuned.
    ScratchDir twice_dir;
    const CommandResult twice =
        tune(twice_dir, std::string("TOKAMAX_FAULT_KILL=") + step + " TOKAMAX_FAULT_KILL_FILE=" +
                            twice_dir.file("kills") + " TOKAMAX_FAULT_KILL_TIMES=2");
    INFO(twice.output);
    CHECK(twice.exit_code == 1);
    const std::string lost = "the worker died " + what + " twice (" + kSigkill +
                             "; then, in a fresh worker, " + kSigkill + ")";
    CHECK_THAT(twice.output, Catch::Contains("no winner: " + lost));
    CHECK_THAT(twice.output, Catch::Contains("1 tuned, 0 cached") &&
                                 Catch::Contains("1 without a verified winner"));
    results = results_by_spec(twice_dir);
    CHECK(results["a_first"]["winner"] == false);
    CHECK(results["a_first"]["reason"] == lost);
    CHECK(results["a_first"]["retries"].size() == 1);
    CHECK(results["b_second"]["config"] == json({{"mode", "ok"}, {"delay_us", 200}}));
  }
}

TEST_CASE("tune names OOM-killed, SIGTERM-ignoring and pipe-closing candidates and goes on",
          "[isolation]") {
  const std::map<std::string, std::pair<std::string, std::string>> expected = {
      {"oom", {"crash", kSigkill}},
      {"ignore_sigterm", {"timeout", "no answer within 1 s; ignored SIGTERM, killed with SIGKILL"}},
      {"close_pipe", {"crash", "worker closed its pipe without answering; killed"}}};
  for (const auto& [mode, outcome] : expected) {
    ScratchDir dir;
    const CommandResult r = tune(dir, "TOKAMAX_FAULT_OOM_MB=128 TOKAMAX_FAULT=" + mode);
    INFO(mode << ": " << r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("2 tuned, 0 cached"));
    const std::map<std::string, json> results = results_by_spec(dir);
    CHECK(results.size() == 2);
    for (const auto& [spec, result] : results) {
      INFO(spec);
      const json heuristics = heuristics_candidate(result);
      CHECK(heuristics["config"]["mode"] == mode);
      CHECK(heuristics["status"] == outcome.first);
      CHECK(heuristics["reason"] == outcome.second);
      CHECK(result["config"] == json({{"mode", "ok"}, {"delay_us", 200}}));
      CHECK(result["retries"].empty());  // the candidate's own death: not retried
    }
  }
}

TEST_CASE("verify retries a setup whose worker was killed, once", "[isolation]") {
  ScratchDir dir;
  const CommandResult r =
      run_command("TOKAMAX_FAULT_KILL=setup TOKAMAX_FAULT_KILL_FILE=" + dir.file("kills") + " " +
                  kTestCli + " verify --spec " + write_spec(dir) + " --op fault_injection");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("fault_injection/a_first: the worker died setting up the "
                                       "case (" +
                                       kSigkill + "); retried in a fresh worker"));
  CHECK_THAT(r.output, Catch::Contains("4 passed, 0 failed"));
}
