// Tests for tune_case: invalid candidates skipped, a fast-but-wrong candidate cannot win.
#include "cli/toolkit/autotuning/tuner.h"

#include <catch2/catch.hpp>

#include "backends/cpu/cpu_device.h"
#include "tests/ops/framework/fake_impls.h"

using namespace tokamax;
using namespace tokamax::testing;

TEST_CASE("tune verifies before a candidate may win", "[tuner]") {
  const FakeRaggedDot fake("fake");
  const FakeRaggedDotOp op({&fake});
  TuneOptions options;
  options.timing.min_time_s = 0.002;
  options.timing.min_samples = 3;
  const TuneResult result =
      tune_case(op, small_ragged_dot_args(), fake, cpu::host_device(), options);
  REQUIRE(result.has_winner);
  // Heuristics (3000 us) + 5 search configs.
  REQUIRE(result.candidates.size() == 6);
  std::map<std::string, int> statuses;
  for (const CandidateResult& c : result.candidates) ++statuses[c.status];
  CHECK(statuses["invalid"] == 1);
  CHECK(statuses["numerics"] == 1);  // mode 1 was fastest but wrong
  CHECK(result.entry.config == nlohmann::json({{"mode", 0}, {"delay_us", 500}}));
  CHECK(result.entry.verified);
  CHECK(result.heuristics_time_s > result.entry.time_s);
  CHECK(result.entry.metadata["impl"] == "fake");
  CHECK(result.entry.metadata.contains("command"));
}

TEST_CASE("tune stops with Interrupted when interrupted", "[tuner]") {
  const FakeRaggedDot fake("fake");
  const FakeRaggedDotOp op({&fake});
  std::atomic<bool> interrupt{true};
  TuneOptions options;
  options.interrupt = &interrupt;
  CHECK_THROWS_AS(tune_case(op, small_ragged_dot_args(), fake, cpu::host_device(), options),
                  Interrupted);
}

TEST_CASE("tune with halving records how far each candidate got", "[tuner]") {
  const FakeRaggedDot fake("fake");
  const FakeRaggedDotOp op({&fake});
  TuneOptions options;
  options.strategy = Strategy::kHalving;
  options.timing.min_time_s = 0.002;
  options.timing.min_samples = 3;
  const TuneResult result =
      tune_case(op, small_ragged_dot_args(), fake, cpu::host_device(), options);
  REQUIRE(result.has_winner);
  CHECK(result.entry.config == nlohmann::json({{"mode", 0}, {"delay_us", 500}}));
  std::map<std::string, int> statuses;
  for (const CandidateResult& c : result.candidates) ++statuses[c.status];
  CHECK(statuses["invalid"] == 1);
  CHECK(statuses["numerics"] == 1);
  // The wrong mode 1 set the bar, so every correct config but the heuristics was aborted early;
  // verification then falls back to the fastest of them.
  CHECK(statuses["pruned"] == 3);
  for (const nlohmann::json& c : result.entry.candidates) {
    if (c["status"] == "pruned") CHECK(c.contains("round"));
    if (c["status"] == "pruned") CHECK(c.contains("reason"));
  }
}

TEST_CASE("tune records where each case's wall time went", "[tuner][search]") {
  const FakeRaggedDot fake("fake");
  const FakeRaggedDotOp op({&fake});
  TuneOptions options;
  options.strategy = Strategy::kHalving;
  options.timing.min_time_s = 0.002;
  options.timing.min_samples = 3;
  const TuneResult result =
      tune_case(op, small_ragged_dot_args(), fake, cpu::host_device(), options);
  REQUIRE(result.has_winner);
  int requests = 0;
  for (const CandidateResult& c : result.candidates) {
    requests += c.requests;
    if (c.status == "invalid") CHECK(c.requests == 0);
    if (c.requests > 0) CHECK(c.to_json().contains("wall_s"));
  }
  CHECK(result.phases.requests == requests);
  CHECK(requests >= 4);              // every valid candidate was timed at least once
  CHECK(result.phases.checks == 2);  // the fast wrong mode 1 first, then the winner
  CHECK(result.phases.total_s >= result.phases.search_s + result.phases.verify_s);
  const nlohmann::json phases = result.phases.to_json();
  for (const char* key : {"setup_s", "search_s", "verify_s", "total_s", "requests", "checks"}) {
    CHECK(phases.contains(key));
  }
}

TEST_CASE("tune with --max-evals times only that many candidates", "[tuner]") {
  const FakeRaggedDot fake("fake");
  const FakeRaggedDotOp op({&fake});
  TuneOptions options;
  options.strategy = Strategy::kRandom;
  options.max_evals = 2;
  options.timing.min_time_s = 0.002;
  options.timing.min_samples = 3;
  const TuneResult result =
      tune_case(op, small_ragged_dot_args(), fake, cpu::host_device(), options);
  int timed = 0;
  for (const CandidateResult& c : result.candidates) {
    timed += !c.samples.empty();
    if (c.is_heuristics) CHECK_FALSE(c.samples.empty());
  }
  CHECK(timed == 2);
}
