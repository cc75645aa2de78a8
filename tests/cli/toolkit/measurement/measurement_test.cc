// Tests of the adaptive measurement rules on synthetic samples: noise estimators, the stopping
// rule, cold-cache copy counts and the drift flag. No timing assertions.
#include "cli/toolkit/measurement/measurement.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The message and field of the InvalidArgument that fn throws.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("quantile interpolates between order statistics, median is its q = 0.5", "[measure]") {
  CHECK(median({3, 1, 2}) == 2);
  CHECK(median({4, 1, 2, 3}) == 2.5);  // between the middle two
  CHECK(quantile({0.8, 0.9, 1.0, 1.1, 1.2}, 0.25) == Approx(0.9));
  CHECK(quantile({10, 0}, 0.3) == Approx(3));  // sorted first, then 30% of the way
  CHECK(quantile({7}, 0) == 7);
  CHECK(quantile({7}, 1) == 7);
  CHECK(quantile({1, 5, 2}, 0) == 1);  // the minimum
  CHECK(quantile({1, 5, 2}, 1) == 5);  // the maximum
  CHECK(std::isnan(median({})));
  CHECK(std::isnan(quantile({}, 0.5)));
}

TEST_CASE("relative_noise: IQR/median and stdev/mean on known samples", "[measure]") {
  // Sorted 1..5: quartiles 2 and 4, median 3 -> IQR/median = 2/3.
  const std::vector<double> ramp = {5, 1, 4, 2, 3};
  CHECK(relative_noise(ramp, NoiseEstimator::kIqrMedian) == Approx(2.0 / 3.0));
  // Mean 3, sample variance 2.5.
  CHECK(relative_noise(ramp, NoiseEstimator::kStdevMean) == Approx(std::sqrt(2.5) / 3.0));
  // Constant samples have no noise.
  CHECK(relative_noise({2, 2, 2}, NoiseEstimator::kIqrMedian) == 0);
  CHECK(relative_noise({2, 2, 2}, NoiseEstimator::kStdevMean) == 0);
  // Fewer than two samples show no spread: unknown, infinite.
  CHECK(std::isinf(relative_noise({}, NoiseEstimator::kIqrMedian)));
  CHECK(std::isinf(relative_noise({1.0}, NoiseEstimator::kStdevMean)));
  CHECK(std::isinf(relative_noise({0, 0, 0}, NoiseEstimator::kIqrMedian)));

  // One wild outlier among 9 steady samples: the IQR ignores it, the stdev does not.
  std::vector<double> outlier(9, 1.0);
  outlier[4] = 1.001;
  outlier.push_back(10.0);
  CHECK(relative_noise(outlier, NoiseEstimator::kIqrMedian) < 0.001);
  CHECK(relative_noise(outlier, NoiseEstimator::kStdevMean) > 1.0);
}

TEST_CASE("estimator, cache mode and fraction parsing name the option", "[measure]") {
  CHECK(parse_estimator("iqr") == NoiseEstimator::kIqrMedian);
  CHECK(parse_estimator("stdev") == NoiseEstimator::kStdevMean);
  CHECK(parse_estimator("stdev/mean") == NoiseEstimator::kStdevMean);
  CHECK(estimator_name(NoiseEstimator::kIqrMedian) == "iqr/median");
  CHECK(estimator_name(NoiseEstimator::kStdevMean) == "stdev/mean");
  CHECK_THAT(error_of([] { parse_estimator("mad", "--estimator"); }),
             Catch::Contains("--estimator") && Catch::Contains("mad"));

  CHECK(parse_cache_mode("hot") == CacheMode::kHot);
  CHECK(parse_cache_mode("cold") == CacheMode::kCold);
  CHECK(cache_mode_name(CacheMode::kCold) == "cold");
  CHECK_THAT(error_of([] { parse_cache_mode("warm", "--cache-mode"); }),
             Catch::Contains("--cache-mode") && Catch::Contains("warm"));

  CHECK(parse_fraction("1%", "--max-noise") == Approx(0.01));
  CHECK(parse_fraction("0.5", "--max-noise") == Approx(0.5));
  CHECK(parse_fraction("0", "--max-noise") == 0);
  CHECK(parse_fraction("150%", "--max-noise") == Approx(1.5));
  for (const char* bad : {"-1", "-1%", "abc", "", "1e999", "%", "0.5x"}) {
    INFO(bad);
    CHECK_THAT(error_of([&] { parse_fraction(bad, "--max-noise"); }),
               Catch::Contains("--max-noise"));
  }
  CHECK_THAT(error_of([] { parse_fraction("5", "--max-drift"); }),
             Catch::Contains("--max-drift") && Catch::Contains("ambiguous"));
}

StopRule rule_for_tests() {
  StopRule rule;
  rule.min_samples = 5;
  rule.max_samples = 100;
  rule.min_time_s = 0.01;
  rule.max_noise = 0.01;
  rule.timeout_s = 1.0;
  rule.estimator = NoiseEstimator::kIqrMedian;
  return rule;
}

// Feeds samples one by one as a runner would (each sample taking its own value of time, plus
// `overhead_s` of wall time) and returns the first decision that stops, with the count.
std::pair<StopDecision, size_t> replay(const std::vector<double>& stream, const StopRule& rule,
                                       double overhead_s = 0) {
  std::vector<double> samples;
  double timed = 0, elapsed = 0;
  StopDecision decision;
  for (double s : stream) {
    samples.push_back(s);
    timed += s;
    elapsed += s + overhead_s;
    decision = should_stop(samples, timed, elapsed, rule);
    if (decision.stop()) break;
  }
  return {decision, samples.size()};
}

TEST_CASE("should_stop settles once min_samples, min_time and the noise bound are met",
          "[measure]") {
  const StopRule rule = rule_for_tests();
  CHECK_FALSE(should_stop({}, 0, 0, rule).stop());

  // Steady samples of 2^-10 s (sums stay exact): noise 0 from the second sample on, but
  // min_samples (5) and min_time (10 ms) hold it until the 11th (10 x 2^-10 < 0.01).
  const auto [steady, steady_count] = replay(std::vector<double>(50, 0x1p-10), rule);
  CHECK(steady.reason == StopReason::kSettled);
  CHECK_FALSE(steady.noisy());
  CHECK(steady.noise == 0);
  CHECK(steady_count == 11);

  // Slow 5 ms samples: min_time is met at 2, min_samples decides (5).
  CHECK(replay(std::vector<double>(50, 5e-3), rule).second == 5);

  // Not before min_samples even when time and noise are fine...
  CHECK_FALSE(should_stop({0.1, 0.1, 0.1, 0.1}, 0.4, 0.4, rule).stop());
  // ...nor before min_time.
  CHECK_FALSE(should_stop({1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4}, 6e-4, 6e-4, rule).stop());
  CHECK(should_stop({1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4}, 0.01, 0.01, rule).reason ==
        StopReason::kSettled);
}

TEST_CASE("should_stop: a burst of noise delays settling, the IQR lets the case recover",
          "[measure]") {
  StopRule rule = rule_for_tests();
  // Eight alternating 1.0 / 1.5 ms samples, then steady 1.0 ms ones.
  std::vector<double> stream;
  for (int i = 0; i < 8; ++i) stream.push_back(i % 2 ? 1.5e-3 : 1.0e-3);
  for (int i = 0; i < 200; ++i) stream.push_back(1.0e-3);
  const auto [decision, count] = replay(stream, rule);
  CHECK(decision.reason == StopReason::kSettled);
  CHECK(decision.noise <= rule.max_noise);
  CHECK(count > 10);  // later than a steady run would have
  // stdev/mean keeps the burst in view: it stays above the bound, and the case settles only by
  // its median, which the burst's minority of samples does not move.
  rule.estimator = NoiseEstimator::kStdevMean;
  const auto [stdev, stdev_count] = replay(stream, rule);
  CHECK(stdev.reason == StopReason::kSettled);
  CHECK(stdev.noise > rule.max_noise);
  CHECK(stdev.median_uncertainty <= rule.max_noise);
  CHECK(stdev_count > count);
}

TEST_CASE("should_stop: never-settling samples hit the timeout or max_samples: noisy",
          "[measure]") {
  StopRule rule = rule_for_tests();
  // Alternating 1/64 and 3/128 s (exact sums) never get below 1%: the 1 s timeout passes at
  // sample 52 (26 pairs of 5/128 s).
  std::vector<double> wild;
  for (int i = 0; i < 1000; ++i) wild.push_back(i % 2 ? 0x3p-7 : 0x1p-6);
  const auto [timeout, timeout_count] = replay(wild, rule);
  CHECK(timeout.reason == StopReason::kTimeout);
  CHECK(timeout.noisy());
  CHECK(timeout.noise > 0.1);
  CHECK(timeout_count == 52);
  CHECK(stop_reason_name(timeout.reason) == "timeout");

  // Fast samples reach max_samples first.
  std::vector<double> fast;
  for (int i = 0; i < 1000; ++i) fast.push_back(i % 2 ? 1.1e-4 : 0.9e-4);
  const auto [capped, capped_count] = replay(fast, rule);
  CHECK(capped.reason == StopReason::kMaxSamples);
  CHECK(capped.noisy());
  CHECK(capped_count == 100);

  // The timeout wins over min_samples: a case slower than its timeout gets what fits (2 here).
  rule.min_samples = 10;
  const auto [slow, slow_count] = replay(std::vector<double>(20, 0.6), rule);
  CHECK(slow.reason == StopReason::kTimeout);
  CHECK(slow_count == 2);

  // Settling is checked before the timeout: a case that settles exactly then is not noisy.
  rule = rule_for_tests();
  CHECK(should_stop(std::vector<double>(5, 0.01), 0.05, 2.0, rule).reason == StopReason::kSettled);
  // An infinite bound (tune's default) stops at min_samples / min_time whatever the noise.
  rule.max_noise = kInf;
  CHECK(replay(wild, rule).second == 5);
}

TEST_CASE("should_stop: a spread within the timer's resolution is not noise", "[measure]") {
  StopRule rule = rule_for_tests();
  rule.min_time_s = 0;
  // A 1 us call timed one at a time by a timer of 0.5 us ticks (CUDA events): readings of 1.0
  // and 1.5 us, an IQR of half the median, all of it the timer's.
  std::vector<double> ticks;
  for (int i = 0; i < 20000; ++i) ticks.push_back(i % 2 ? 1.5e-6 : 1.0e-6);
  const auto [unresolved, unresolved_count] = replay(ticks, rule);
  CHECK(unresolved.noisy());
  CHECK(unresolved_count == 100);
  std::vector<double> samples;
  double timed = 0;
  StopDecision decision;
  for (double t : ticks) {
    samples.push_back(t);
    timed += t;
    decision = should_stop(samples, timed, timed, rule, /*tick_s=*/0.5e-6);
    if (decision.stop()) break;
  }
  CHECK(decision.reason == StopReason::kSettled);
  CHECK_FALSE(decision.noisy());
  CHECK(decision.noise == Approx(0.5));  // still reported: the estimator's value
  // A spread of more than two ticks is the run's: noisy as before.
  std::vector<double> wide;
  for (int i = 0; i < 1000; ++i) wide.push_back(i % 2 ? 3.0e-6 : 1.0e-6);
  samples.clear();
  timed = 0;
  for (double t : wide) {
    samples.push_back(t);
    timed += t;
    decision = should_stop(samples, timed, timed, rule, 0.5e-6);
    if (decision.stop()) break;
  }
  CHECK(decision.noisy());
}

TEST_CASE("median_uncertainty: the order-statistics interval of the median", "[measure]") {
  CHECK(std::isinf(median_uncertainty({1, 1, 1, 1, 1, 1, 1})));  // 7: the interval passes the ends
  // 8 samples: ranks 1 and 8, the whole range: (3 - 1) / (2 x 2).
  CHECK(median_uncertainty({1, 2, 2, 2, 2, 2, 2, 3}) == Approx(0.5));
  // A quarter of 1000 samples disturbed (x1.5): the IQR sees them, the median's interval does not.
  std::vector<double> disturbed;
  for (int i = 0; i < 1000; ++i) disturbed.push_back(i % 4 == 0 ? 1.5 : 1.0 + 1e-5 * (i % 7));
  CHECK(relative_noise(disturbed, NoiseEstimator::kIqrMedian) > 0.1);
  CHECK(median_uncertainty(disturbed) < 1e-4);
  // Half of them disturbed: the median itself is in doubt.
  for (size_t i = 0; i < disturbed.size(); i += 2) disturbed[i] = 1.5;
  CHECK(median_uncertainty(disturbed) > 0.1);
}

TEST_CASE("StopRule validation names the field", "[measure]") {
  StopRule rule = rule_for_tests();
  CHECK_NOTHROW(validate(rule));
  rule.min_samples = 0;
  CHECK_THAT(error_of([&] { validate(rule); }), Catch::Contains("min_samples"));
  rule = rule_for_tests();
  rule.max_samples = 4;
  CHECK_THAT(error_of([&] { validate(rule); }), Catch::Contains("max_samples"));
  rule = rule_for_tests();
  rule.max_noise = -1;
  CHECK_THAT(error_of([&] { validate(rule); }), Catch::Contains("max_noise"));
  rule = rule_for_tests();
  rule.timeout_s = 0;
  CHECK_THAT(error_of([&] { validate(rule); }), Catch::Contains("timeout_s"));
  rule = rule_for_tests();
  rule.min_time_s = std::nan("");
  CHECK_THAT(error_of([&] { validate(rule); }), Catch::Contains("min_time_s"));
}

TEST_CASE("cold_copies overflows the last-level cache between two uses of a copy", "[measure]") {
  const int64_t mib = 1 << 20;
  // 1 MiB per copy against 32 MiB: the 64 others hold 2 x 32 MiB.
  CHECK(cold_copies(mib, 32 * mib) == 65);
  // Not a divisor: rounded up.
  CHECK(cold_copies(3 * mib, 32 * mib) == 1 + 22);
  // A footprint beyond twice the cache still alternates between two copies.
  CHECK(cold_copies(100 * mib, 32 * mib) == 2);
  // Unknown sizes: one copy.
  CHECK(cold_copies(0, 32 * mib) == 1);
  CHECK(cold_copies(mib, 0) == 1);
  // The memory cap: 4 KiB copies of a 1 GiB cache would need 512Ki + 1 copies (2 GiB).
  CHECK(cold_copies(4096, 1024 * mib) == static_cast<int>(kMaxColdBytes / 4096));
  CHECK(cold_copies(600 * mib, 32 * mib) == 1);  // two would exceed 1 GiB
  CHECK(cold_copies(mib, 32 * mib, 10 * mib) == 10);
  // The property, uncapped: the other copies always cover factor x cache.
  for (int64_t footprint : {int64_t{4096}, int64_t{100000}, 5 * mib, 48 * mib}) {
    for (int64_t llc : {8 * mib, 32 * mib, 96 * mib}) {
      INFO(footprint << " " << llc);
      const int copies = cold_copies(footprint, llc, int64_t{1} << 40);
      CHECK(static_cast<double>(copies - 1) * static_cast<double>(footprint) >=
            kColdCacheFactor * static_cast<double>(llc));
      CHECK(static_cast<double>(copies - 2) * static_cast<double>(footprint) <
            kColdCacheFactor * static_cast<double>(llc));
    }
  }
}

TEST_CASE("check_drift flags probe changes beyond the threshold either way", "[measure]") {
  const DriftCheck slower = check_drift(2e-3, 2.12e-3, 0.05);
  CHECK(slower.change == Approx(0.06));
  CHECK(slower.drifted);
  const DriftCheck faster = check_drift(2e-3, 1.88e-3, 0.05);
  CHECK(faster.change == Approx(-0.06));
  CHECK(faster.drifted);
  const DriftCheck steady = check_drift(2e-3, 2.08e-3, 0.05);
  CHECK(steady.change == Approx(0.04));
  CHECK_FALSE(steady.drifted);
  CHECK(check_drift(1, 1.1, 0.05).drifted);  // exactly representable enough: 10% > 5%
  CHECK_FALSE(check_drift(1, 1.05, 0.06).drifted);
  // No probe (zeros): nothing to compare, never flagged.
  const DriftCheck none = check_drift(0, 0, 0.05);
  CHECK(none.change == 0);
  CHECK_FALSE(none.drifted);
  CHECK(none.before_s == 0);
}

TEST_CASE("the drift probe returns a positive, finite time", "[measure]") {
  const double t = time_drift_probe(1);
  CHECK((std::isfinite(t) && t > 0));
}

TEST_CASE("bandwidth probe: the mean of the probes before and after a case", "[measure]") {
  BandwidthProbe probe;
  CHECK_FALSE(probe.probed());
  CHECK(probe.mean_gbps() == 0.0);
  probe.before_gbps = 50;
  CHECK_FALSE(probe.probed());  // one side alone is no measurement
  probe.after_gbps = 60;
  CHECK(probe.probed());
  CHECK(probe.mean_gbps() == 55.0);
}

}  // namespace
}  // namespace tokamax
