// Sampling of a callable on a device's timer, batched so that timer overhead stays negligible.
#include "cli/toolkit/measurement/timing.h"

#include <algorithm>
#include <cmath>

#include "backends/clock.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

void check(const std::atomic<bool>* interrupt) {
  if (interrupt != nullptr && interrupt->load()) throw Interrupted();
}

// Calls per sample so that a sample lasts about sample_time_s.
int batch_size(double sample_time_s, double one_call_s) {
  return static_cast<int>(std::clamp(sample_time_s / std::max(one_call_s, 1e-9), 1.0, 1e6));
}

// The lean variant (warmup_runs == 0): no separate warm-up, no noise rule.
std::vector<double> time_calls_lean(const std::function<void()>& call, const TimingOptions& options,
                                    Timer& timer, const std::atomic<bool>* interrupt) {
  check(interrupt);
  timer.start();
  call();
  const double one_call = timer.stop();
  std::vector<double> samples;
  double timed = 0.0;
  if (one_call >= options.sample_time_s) {
    samples.push_back(one_call);
    timed = one_call;
  }
  const int batch = batch_size(options.sample_time_s, one_call);
  while (static_cast<int>(samples.size()) < options.max_samples &&
         (static_cast<int>(samples.size()) < options.min_samples || timed < options.min_time_s)) {
    check(interrupt);
    timer.start();
    for (int i = 0; i < batch; ++i) call();
    const double elapsed = timer.stop();
    timed += elapsed;
    samples.push_back(elapsed / batch);
  }
  return samples;
}

}  // namespace

std::vector<double> time_calls(const std::function<void()>& call, const TimingOptions& options,
                               const Device& device, const std::atomic<bool>* interrupt) {
  const std::unique_ptr<Timer> timer = device.timer();
  if (options.warmup_runs <= 0) return time_calls_lean(call, options, *timer, interrupt);
  double one_call = 0.0;
  for (int i = 0; i < options.warmup_runs; ++i) {
    check(interrupt);
    timer->start();
    call();
    one_call = timer->stop();
  }
  // Microsecond-scale calls are timed in batches; a sample is the batch's mean per call.
  const int batch = batch_size(options.sample_time_s, one_call);
  StopRule rule;
  // As before the rule existed: max_samples caps min_samples too.
  rule.max_samples = options.max_samples;
  rule.min_samples = std::min(options.min_samples, options.max_samples);
  rule.min_time_s = options.min_time_s;
  rule.max_noise = options.max_noise;
  rule.timeout_s = options.timeout_s;
  rule.estimator = options.estimator;
  std::vector<double> samples;
  double timed = 0.0;
  const double begin = wall_seconds();
  // max_samples <= 0 took no samples before: keep that.
  while (options.max_samples > 0) {
    check(interrupt);
    timer->start();
    for (int i = 0; i < batch; ++i) call();
    const double elapsed = timer->stop();
    timed += elapsed;
    samples.push_back(elapsed / batch);
    if (should_stop(samples, timed, wall_seconds() - begin, rule, timer->resolution_s() / batch)
            .stop()) {
      break;
    }
  }
  return samples;
}

}  // namespace tokamax
