// Wall-clock sampling of a callable, batched so that timer overhead stays negligible.
#include "ops/framework/measurement/timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check(const std::atomic<bool>* interrupt) {
  if (interrupt != nullptr && interrupt->load()) throw Interrupted();
}

}  // namespace

double median(std::vector<double> values) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

std::vector<double> time_calls(const std::function<void()>& call, const TimingOptions& options,
                               const std::atomic<bool>* interrupt) {
  double one_call = 0.0;
  for (int i = 0; i < std::max(options.warmup_runs, 1); ++i) {
    check(interrupt);
    const double start = now_s();
    call();
    one_call = now_s() - start;
  }
  // Microsecond-scale calls are timed in batches; a sample is the batch's mean per call.
  const int batch =
      static_cast<int>(std::clamp(options.sample_time_s / std::max(one_call, 1e-9), 1.0, 1e6));
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
  const double begin = now_s();
  // max_samples <= 0 took no samples before: keep that.
  while (options.max_samples > 0) {
    check(interrupt);
    const double start = now_s();
    for (int i = 0; i < batch; ++i) call();
    const double elapsed = now_s() - start;
    timed += elapsed;
    samples.push_back(elapsed / batch);
    if (should_stop(samples, timed, now_s() - begin, rule).stop()) break;
  }
  return samples;
}

}  // namespace tokamax
