// Helpers of the harness tests: a tiny ragged_dot case, quick timing and bench options, and
// serve_worker driven with request lines.
#pragma once

#include <catch2/catch.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/toolkit/harness/worker_protocol.h"
#include "ops/ragged_dot/api.h"

namespace tokamax::testing {

inline const std::string kTestCli = TOKAMAX_TEST_CLI;

inline CaseSetup tiny_case(const std::string& op) {
  CaseSetup setup;
  setup.op = op;
  setup.args = ragged_dot_op().bind(
      {{"lhs", "f32[24,16]"}, {"rhs", "f32[3,16,8]"}, {"group_sizes", {10, 0, 9}}});
  setup.args.op = op;
  setup.seed = 3;
  return setup;
}

inline TimingOptions quick_timing() {
  TimingOptions timing;
  timing.min_samples = 3;
  timing.max_samples = 5;
  timing.min_time_s = 0.002;
  timing.sample_time_s = 5e-4;
  return timing;
}

// Exactly two samples, one warm-up call, no drift probe: a bench request that is quick.
inline BenchOptions two_sample_bench() {
  BenchOptions bench;
  bench.warmup_runs = 1;
  bench.stop.min_samples = 2;
  bench.stop.max_samples = 2;
  bench.stop.min_time_s = 0;
  bench.drift_probe = false;
  return bench;
}

inline nlohmann::json two_sample_bench_json() { return bench_options_to_json(two_sample_bench()); }

inline nlohmann::json fault(const std::string& mode) { return {{"mode", mode}, {"delay_us", 0}}; }

inline bool all_pass(const CheckResult& check) {
  if (check.status != "ok" || check.comparisons.empty()) return false;
  for (const auto& [name, comparison] : check.comparisons) {
    if (judge(comparison) != Disposition::kPassed) return false;
  }
  return true;
}

// Runs request lines through serve_worker; returns the response lines parsed.
inline std::vector<nlohmann::json> serve(const std::vector<nlohmann::json>& requests) {
  std::string input;
  for (const nlohmann::json& r : requests) input += r.dump() + "\n";
  input += "this is not json\n";
  std::istringstream in(input);
  std::vector<nlohmann::json> responses;
  CHECK(serve_worker(in, [&](const std::string& line) {
          CHECK(line.find('\n') == std::string::npos);
          responses.push_back(nlohmann::json::parse(line));
        }) == 0);
  REQUIRE(responses.size() == requests.size() + 1);
  CHECK(responses.back()["ok"] == false);  // the non-JSON line
  responses.pop_back();
  return responses;
}

}  // namespace tokamax::testing
