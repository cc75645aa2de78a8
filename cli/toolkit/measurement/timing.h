// Timing of tuning candidates on the device's timer: batches fast calls, returns per-call samples.
#pragma once

#include <atomic>
#include <functional>
#include <limits>
#include <vector>

#include "backends/device.h"
#include "cli/toolkit/measurement/measurement.h"

namespace tokamax {

struct TimingOptions {
  int warmup_runs = 1;
  int min_samples = 5;
  int max_samples = 50;
  double min_time_s = 0.05;     // total timed time per candidate
  double sample_time_s = 2e-3;  // calls are batched so one sample lasts about this long
  // The bench stopping rule (cli/toolkit/measurement/measurement.h) on top of the counts above:
  // after min_samples and min_time_s, keep sampling until the noise is <= max_noise or timeout_s
  // (wall seconds of sampling) passes. The defaults (infinite) stop right at min_samples /
  // min_time_s.
  double max_noise = std::numeric_limits<double>::infinity();
  double timeout_s = std::numeric_limits<double>::infinity();
  NoiseEstimator estimator = NoiseEstimator::kIqrMedian;
};

// Per-call seconds on `device`'s timer, one value per sample; stops by should_stop() with the
// options' StopRule. With warmup_runs == 0, the lean variant of tune's halving: the first call
// calibrates the batch and counts as a sample when it alone lasts a sample (slow kernels waste
// nothing), and sampling stops at min_samples and min_time_s. Checks `interrupt` between calls
// and throws Interrupted when it is set (the candidate is abandoned).
std::vector<double> time_calls(const std::function<void()>& call, const TimingOptions& options,
                               const Device& device, const std::atomic<bool>* interrupt = nullptr);

}  // namespace tokamax
