// Adaptive measurement: run noise, when to stop sampling, cold-cache copies, the drift probe.
// Everything here but time_drift_probe is a pure function, so the rules are testable with
// synthetic samples.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tokamax {

// --- Order statistics. ------------------------------------------------------------------------

// The q-quantile (q in [0, 1]) by linear interpolation between order statistics (numpy's
// default; q = 0.5 is the median as Google Benchmark computes it). NaN for no values. The one
// implementation behind every median, quartile and IQR of the measurement, the tuner and
// bench --compare.
double quantile(std::vector<double> values, double q);
double median(std::vector<double> values);

// --- Run noise. --------------------------------------------------------------------------------

// How the relative noise of a case's samples is estimated.
//   kIqrMedian: interquartile range / median (linear interpolation between order statistics).
//     Robust: a minority of disturbed samples (< 25% on either side) does not move it, so more
//     samples let a case settle after a burst of noise. The default; bench --compare uses it too.
//   kStdevMean: sample standard deviation / mean (the coefficient of variation). Every outlier
//     counts, so one disturbed sample can keep a case from ever settling.
enum class NoiseEstimator { kIqrMedian, kStdevMean };

std::string_view estimator_name(NoiseEstimator estimator);  // "iqr/median", "stdev/mean"
// "iqr" or "stdev" (also the full names above); throws InvalidArgument naming `option` otherwise.
NoiseEstimator parse_estimator(const std::string& text, const std::string& option = "estimator");

// The estimator over the samples, a fraction. Infinity for fewer than 2 samples (one sample
// shows no spread) or a non-positive center.
double relative_noise(const std::vector<double>& samples, NoiseEstimator estimator);

// How precisely the samples fix their median: the half-width of its distribution-free 95%
// confidence interval (order statistics j..k around n/2, j = floor((n - 1.96 sqrt(n)) / 2), k =
// ceil(1 + (n + 1.96 sqrt(n)) / 2)) over the median, a fraction. A minority of disturbed samples
// widens the IQR but not this; more samples narrow it. Infinity where the interval reaches past
// the samples (fewer than 8) or for a non-positive median.
double median_uncertainty(const std::vector<double>& samples);

// "1%" (a percentage) or "0.01" (a fraction) -> 0.01. A bare number >= 1 is ambiguous and
// rejected, as are negative, non-finite and non-numeric texts: InvalidArgument naming `option`
// (e.g. "--max-noise").
double parse_fraction(const std::string& text, const std::string& option);

// --- Stopping rule. ----------------------------------------------------------------------------

struct StopRule {
  int min_samples = 10;     // never settle before this many samples
  int max_samples = 1000;   // hard cap on the sample count (unsettled: noisy)
  double min_time_s = 0.1;  // never settle before this much timed time (sum of the samples)
  // Settled once relative_noise or median_uncertainty is <= max_noise.
  double max_noise = 0.01;
  double timeout_s = 5.0;  // hard cap on the wall time since sampling began (unsettled: noisy)
  NoiseEstimator estimator = NoiseEstimator::kIqrMedian;
};

enum class StopReason {
  kContinue,    // take another sample
  kSettled,     // min_samples and min_time reached, and the noise or the median's uncertainty
                // <= max_noise
  kMaxSamples,  // max_samples reached without settling
  kTimeout,     // timeout_s reached without settling
};
std::string_view stop_reason_name(StopReason reason);  // "running", "settled", ...

struct StopDecision {
  StopReason reason = StopReason::kContinue;
  double noise = 0;               // relative_noise of the samples so far
  double median_uncertainty = 0;  // median_uncertainty of the samples so far
  bool stop() const { return reason != StopReason::kContinue; }
  bool noisy() const { return reason == StopReason::kMaxSamples || reason == StopReason::kTimeout; }
};

// After each sample: `samples` so far (per-call seconds), `timed_s` the timed seconds they
// took together, `elapsed_s` the wall seconds since sampling began (timing overhead included),
// `tick_s` the timer's resolution per call (its resolution over the calls of a sample).
// Settling is checked first, then the timeout, then max_samples; no samples: continue. Settled:
// the noise within max_noise, or a spread within two ticks (the estimator's: IQR or standard
// deviation; it is the timer's, not the run's), or the median fixed within max_noise
// (median_uncertainty: a case whose every fourth sample is disturbed still has a precise
// median, which is what bench reports).
StopDecision should_stop(const std::vector<double>& samples, double timed_s, double elapsed_s,
                         const StopRule& rule, double tick_s = 0);

// Throws InvalidArgument naming the field: min_samples >= 1, max_samples >= min_samples,
// min_time_s >= 0, max_noise >= 0, timeout_s > 0 (all finite except max_noise/timeout_s, which
// may be infinite).
void validate(const StopRule& rule);

// --- Cold cache. -------------------------------------------------------------------------------

enum class CacheMode { kHot, kCold };
std::string_view cache_mode_name(CacheMode mode);  // "hot", "cold"
CacheMode parse_cache_mode(const std::string& text, const std::string& option = "cache_mode");

// How much more than the last-level cache the other copies must hold, so that a copy is gone
// from the cache when its turn comes again even with a replacement policy that is not LRU.
inline constexpr double kColdCacheFactor = 2.0;
inline constexpr int64_t kMaxColdBytes = int64_t{1} << 30;  // all copies together, 1 GiB

// Copies of one set of inputs + outputs (`footprint_bytes`) to cycle through so that, between two
// uses of a copy, the others touch kColdCacheFactor x llc_bytes: 1 + ceil(factor x llc /
// footprint), at least 1 (2 when the footprint alone exceeds the cache), capped so that all copies
// stay within max_total_bytes. A footprint or cache size <= 0 gives 1.
int cold_copies(int64_t footprint_bytes, int64_t llc_bytes,
                int64_t max_total_bytes = kMaxColdBytes);

// --- Drift. ------------------------------------------------------------------------------------

// The probe before and after one case, and whether the machine's speed moved in between.
struct DriftCheck {
  double before_s = 0, after_s = 0;  // probe times
  double change = 0;                 // after / before - 1: > 0 the machine got slower
  bool drifted = false;              // |change| > threshold
};
DriftCheck check_drift(double before_s, double after_s, double threshold);

// Times the probe: a fixed, single-threaded, compute-bound loop (dependent multiply-add chains,
// no memory traffic, ~1-3 ms on a current core); the fastest of `runs` runs, in seconds.
double time_drift_probe(int runs = 3);

// --- Bandwidth probe. ----------------------------------------------------------------------------

// The memory bandwidth around one case: a STREAM triad on every core right before and right
// after it. Where the memory is shared with other machines (this one's triad moves between 50
// and 90 GB/s within minutes), a stored ceiling measured at another moment says little about
// the bandwidth a memory-bound case actually had; the mean of the two probes does.
struct BandwidthProbe {
  double before_gbps = 0, after_gbps = 0;  // 0: not probed
  bool probed() const { return before_gbps > 0 && after_gbps > 0; }
  double mean_gbps() const { return probed() ? 0.5 * (before_gbps + after_gbps) : 0.0; }
};

}  // namespace tokamax
