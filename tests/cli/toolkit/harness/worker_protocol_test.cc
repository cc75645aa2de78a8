// The worker protocol: serialization of requests and results, and serve_worker.
#include "cli/toolkit/harness/worker_protocol.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "ops/framework/errors.h"
#include "tests/cli/toolkit/harness/harness_test_util.h"
#include "tests/support/fault_injection_op.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

TEST_CASE("worker protocol round-trips results exactly, inf and nan included", "[isolation]") {
  TimeResult timed;
  timed.samples = {1.2345678901234567e-6, 3e-3, std::nextafter(1.0, 2.0), 5e-324};
  const TimeResult back = time_result_from_json(json::parse(time_result_to_json(timed).dump()));
  CHECK(back.status == "ok");
  REQUIRE(back.samples.size() == timed.samples.size());
  for (size_t i = 0; i < timed.samples.size(); ++i) {
    CHECK(std::memcmp(&back.samples[i], &timed.samples[i], sizeof(double)) == 0);
  }

  CheckResult check;
  Comparison c;
  c.worst_ratio = INFINITY;
  c.max_abs_error = NAN;
  c.nonfinite = 2;
  c.sampled = 10;
  c.total = 20;
  c.worst_index = 7;
  c.max_abs_oracle = 3.5;
  check.comparisons["out"] = c;
  const CheckResult parsed =
      check_result_from_json(json::parse(check_result_to_json(check).dump()));
  const Comparison& p = parsed.comparisons.at("out");
  CHECK(std::isinf(p.worst_ratio));
  CHECK(std::isnan(p.max_abs_error));
  CHECK(p.nonfinite == 2);
  CHECK(p.worst_index == 7);
  CHECK(p.max_abs_oracle == 3.5);
  CHECK(judge(p) == Disposition::kFailed);

  BenchStats stats;
  stats.name = "a/b/c";
  stats.samples_s = {1e-5, 2.5e-5};
  stats.median_s = 1.75e-5;
  stats.iterations = 1000;
  stats.noise = std::numeric_limits<double>::infinity();
  stats.noisy = true;
  stats.stop_reason = StopReason::kTimeout;
  stats.cache_copies = 7;
  stats.drift.change = 0.06;
  stats.drift.drifted = true;
  stats.bandwidth.before_gbps = 51.5;
  stats.bandwidth.after_gbps = 49.25;
  stats.round_medians_s = {1.5e-5, 2e-5};
  const BenchStats s = bench_stats_from_json(json::parse(bench_stats_to_json(stats).dump()));
  CHECK(s.bandwidth.before_gbps == 51.5);
  CHECK(s.bandwidth.after_gbps == 49.25);
  CHECK(s.samples_s == stats.samples_s);
  CHECK(s.round_medians_s == stats.round_medians_s);
  CHECK(s.median_s == stats.median_s);
  CHECK(s.iterations == 1000);
  CHECK(s.noise == stats.noise);
  CHECK(s.noisy);
  CHECK(s.stop_reason == StopReason::kTimeout);
  CHECK(s.cache_copies == 7);
  CHECK(s.drift.change == 0.06);
  CHECK(s.drift.drifted);

  TimingOptions timing = quick_timing();
  timing.warmup_runs = 0;
  const TimingOptions t = timing_from_json(timing_to_json(timing));
  CHECK(t.warmup_runs == 0);
  CHECK(t.min_time_s == timing.min_time_s);
  BenchOptions options;
  options.context = {{"k", "v"}};
  options.json_path = "x.json";
  options.stop.max_noise = 0.02;
  options.stop.timeout_s = std::numeric_limits<double>::infinity();
  options.stop.estimator = NoiseEstimator::kStdevMean;
  options.cache_mode = CacheMode::kCold;
  options.llc_bytes = 32 << 20;
  options.drift_probe = false;
  options.bandwidth_probe = true;
  options.max_drift = 0.1;
  options.rounds = 4;
  const BenchOptions o = bench_options_from_json(bench_options_to_json(options));
  CHECK(o.bandwidth_probe);
  CHECK(o.context == options.context);
  CHECK(o.json_path == "x.json");
  CHECK(o.stop.max_noise == 0.02);
  CHECK(o.stop.timeout_s == options.stop.timeout_s);
  CHECK(o.stop.estimator == NoiseEstimator::kStdevMean);
  CHECK(o.cache_mode == CacheMode::kCold);
  CHECK(o.llc_bytes == 32 << 20);
  CHECK(!o.drift_probe);
  CHECK(o.max_drift == 0.1);
  CHECK(o.rounds == 4);
}

TEST_CASE("serve_worker answers setup, time, check and bench requests", "[isolation]") {
  const CaseSetup setup = tiny_case("ragged_dot");
  const json setup_request = {
      {"cmd", "setup"}, {"op", "ragged_dot"},   {"args", setup.args.to_json()},
      {"seed", 3},      {"oracle_budget", 5e8}, {"dump_dir", ""}};
  const std::vector<json> responses = serve({
      {{"cmd", "time"},  // before setup
       {"impl", "reference"},
       {"config", json::object()},
       {"timing", timing_to_json(quick_timing())}},
      setup_request,
      {{"cmd", "oracle"}},
      {{"cmd", "time"},
       {"impl", "reference"},
       {"config", json::object()},
       {"timing", timing_to_json(quick_timing())}},
      {{"cmd", "check"}, {"impl", "reference"}, {"config", json::object()}},
      {{"cmd", "check"}, {"impl", "no_such_impl"}, {"config", json::object()}},
      {{"cmd", "bench"},
       {"jobs",
        {{{"impl", "reference"},
          {"config", json::object()},
          {"name", "ragged_dot/tiny/reference"},
          {"flops", 100.0},
          {"bytes", 10.0},
          {"label", ""}}}},
       {"options", two_sample_bench_json()}},
      {{"cmd", "frobnicate"}},
  });
  CHECK(responses[0]["ok"] == false);
  CHECK_THAT(responses[0]["reason"].get<std::string>(), Catch::Contains("no case"));
  CHECK(responses[1]["ok"] == true);
  CHECK(responses[2]["ok"] == true);
  CHECK(responses[3]["ok"] == true);
  CHECK(responses[3]["status"] == "ok");
  CHECK(responses[3]["samples"].size() >= 3);
  CHECK(responses[4]["ok"] == true);
  CHECK(all_pass(check_result_from_json(responses[4])));
  CHECK(responses[5]["ok"] == false);
  CHECK_THAT(responses[5]["reason"].get<std::string>(), Catch::Contains("no_such_impl"));
  CHECK(responses[6]["ok"] == true);
  const json& outcome = responses[6]["outcomes"][0];
  CHECK(outcome["status"] == "ok");
  CHECK(bench_stats_from_json(outcome["stats"]).samples_s.size() == 2);
  CHECK(responses[7]["ok"] == false);
}
