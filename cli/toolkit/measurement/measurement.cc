// Adaptive measurement: run noise, stopping rule, cold-cache copy count, drift probe.
#include "cli/toolkit/measurement/measurement.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backends/clock.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

// --- Order statistics. -------------------------------------------------------------------------

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double position = q * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return values[below] + fraction * (values[above] - values[below]);
}

double median(std::vector<double> values) { return quantile(std::move(values), 0.5); }

// --- Run noise. --------------------------------------------------------------------------------

std::string_view estimator_name(NoiseEstimator estimator) {
  return estimator == NoiseEstimator::kStdevMean ? "stdev/mean" : "iqr/median";
}

NoiseEstimator parse_estimator(const std::string& text, const std::string& option) {
  const std::string name = lower(text);
  if (name == "iqr" || name == "iqr/median") return NoiseEstimator::kIqrMedian;
  if (name == "stdev" || name == "stdev/mean") return NoiseEstimator::kStdevMean;
  throw InvalidArgument(option + " '" + text + "' is not iqr or stdev", option);
}

double relative_noise(const std::vector<double>& samples, NoiseEstimator estimator) {
  if (samples.size() < 2) return kInf;
  if (estimator == NoiseEstimator::kStdevMean) {
    const double n = static_cast<double>(samples.size());
    const double mean = std::accumulate(samples.begin(), samples.end(), 0.0) / n;
    if (!(mean > 0)) return kInf;
    double sum_sq = 0;
    for (double x : samples) sum_sq += (x - mean) * (x - mean);
    return std::sqrt(sum_sq / (n - 1)) / mean;
  }
  const double mid = median(samples);
  if (!(mid > 0)) return kInf;
  return (quantile(samples, 0.75) - quantile(samples, 0.25)) / mid;
}

double median_uncertainty(const std::vector<double>& samples) {
  const double n = static_cast<double>(samples.size());
  if (samples.size() < 6) return kInf;
  const double spread = 1.96 * std::sqrt(n);
  const auto j = static_cast<size_t>(std::floor((n - spread) / 2));     // 1-based rank
  const auto k = static_cast<size_t>(std::ceil(1 + (n + spread) / 2));  // 1-based rank
  if (j < 1 || k > samples.size()) return kInf;
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  const double mid = quantile(sorted, 0.5);
  if (!(mid > 0)) return kInf;
  return (sorted[k - 1] - sorted[j - 1]) / (2 * mid);
}

double parse_fraction(const std::string& text, const std::string& option) {
  const bool percent = !text.empty() && text.back() == '%';
  const std::string number = percent ? text.substr(0, text.size() - 1) : text;
  double value = 0;
  size_t used = 0;
  try {
    value = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (number.empty() || used != number.size() || !std::isfinite(value) || value < 0) {
    throw InvalidArgument(
        option + " '" + text + "' is not a fraction >= 0 (0.01) or a percentage (1%)", option);
  }
  if (!percent && value >= 1) {
    throw InvalidArgument(option + " '" + text + "' is ambiguous: write a fraction (0.01) or a " +
                              "percentage (" + number + "%)",
                          option);
  }
  return percent ? value / 100 : value;
}

// --- Stopping rule. ----------------------------------------------------------------------------

std::string_view stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kSettled:
      return "settled";
    case StopReason::kMaxSamples:
      return "max_samples";
    case StopReason::kTimeout:
      return "timeout";
    default:
      return "running";
  }
}

StopDecision should_stop(const std::vector<double>& samples, double timed_s, double elapsed_s,
                         const StopRule& rule, double tick_s) {
  StopDecision decision;
  if (samples.empty()) return decision;
  decision.noise = relative_noise(samples, rule.estimator);
  // The relative noise that two ticks of the timer make at the estimator's center.
  double resolved = 0;
  if (tick_s > 0) {
    const double center = rule.estimator == NoiseEstimator::kStdevMean
                              ? std::accumulate(samples.begin(), samples.end(), 0.0) /
                                    static_cast<double>(samples.size())
                              : median(samples);
    if (center > 0) resolved = 2 * tick_s / center;
  }
  decision.median_uncertainty = median_uncertainty(samples);
  const int count = static_cast<int>(samples.size());
  const bool precise = decision.noise <= std::max(rule.max_noise, resolved) ||
                       decision.median_uncertainty <= rule.max_noise;
  if (count >= rule.min_samples && timed_s >= rule.min_time_s && precise) {
    decision.reason = StopReason::kSettled;
  } else if (elapsed_s >= rule.timeout_s) {
    decision.reason = StopReason::kTimeout;
  } else if (count >= rule.max_samples) {
    decision.reason = StopReason::kMaxSamples;
  }
  return decision;
}

void validate(const StopRule& rule) {
  auto require = [](bool ok, const std::string& field, const std::string& what) {
    if (!ok) throw InvalidArgument("measurement: " + field + " " + what, field);
  };
  require(rule.min_samples >= 1, "min_samples",
          "is " + std::to_string(rule.min_samples) + " but must be >= 1");
  require(rule.max_samples >= rule.min_samples, "max_samples",
          "is " + std::to_string(rule.max_samples) + " but must be >= min_samples (" +
              std::to_string(rule.min_samples) + ")");
  require(std::isfinite(rule.min_time_s) && rule.min_time_s >= 0, "min_time_s",
          "must be >= 0 seconds");
  require(!std::isnan(rule.max_noise) && rule.max_noise >= 0, "max_noise", "must be >= 0");
  require(!std::isnan(rule.timeout_s) && rule.timeout_s > 0, "timeout_s", "must be > 0 seconds");
}

// --- Cold cache. -------------------------------------------------------------------------------

std::string_view cache_mode_name(CacheMode mode) {
  return mode == CacheMode::kCold ? "cold" : "hot";
}

CacheMode parse_cache_mode(const std::string& text, const std::string& option) {
  if (text == "hot") return CacheMode::kHot;
  if (text == "cold") return CacheMode::kCold;
  throw InvalidArgument(option + " '" + text + "' is not hot or cold", option);
}

int cold_copies(int64_t footprint_bytes, int64_t llc_bytes, int64_t max_total_bytes) {
  if (footprint_bytes <= 0 || llc_bytes <= 0) return 1;
  const double others = std::ceil(kColdCacheFactor * static_cast<double>(llc_bytes) /
                                  static_cast<double>(footprint_bytes));
  const double wanted = 1 + std::max(others, 1.0);
  const double affordable =
      std::floor(static_cast<double>(max_total_bytes) / static_cast<double>(footprint_bytes));
  return static_cast<int>(std::max(1.0, std::min({wanted, affordable, 1e6})));
}

// --- Drift. ------------------------------------------------------------------------------------

DriftCheck check_drift(double before_s, double after_s, double threshold) {
  DriftCheck check;
  check.before_s = before_s;
  check.after_s = after_s;
  if (before_s > 0 && after_s > 0) {
    check.change = after_s / before_s - 1;
    check.drifted = std::abs(check.change) > threshold;
  }
  return check;
}

double time_drift_probe(int runs) {
  // Four dependent multiply-add chains: latency-bound on one core, no memory traffic. The seeds
  // are volatile so the compiler cannot fold the loop; the result is kept for the same reason.
  constexpr int kIterations = 1 << 20;
  static volatile double seed = 1.0;
  static volatile double sink = 0.0;
  double best = kInf;
  for (int run = 0; run < std::max(runs, 1); ++run) {
    double a = seed, b = seed * 0.5, c = seed * 0.25, d = seed * 0.125;
    const double m = 0.9999999, k = 1e-7;
    const double start = wall_seconds();
    for (int i = 0; i < kIterations; ++i) {
      a = a * m + k;
      b = b * m + k;
      c = c * m + k;
      d = d * m + k;
    }
    const double stop = wall_seconds();
    sink = sink + a + b + c + d;
    best = std::min(best, stop - start);
  }
  return best;
}

}  // namespace tokamax
