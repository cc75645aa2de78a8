// verify: the portable reference's time estimate (see reference_estimate.h).
#include "cli/toolkit/harness/reference_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/toolkit/catalog/arg_spec.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

// The largest smoke spec of `op` by FLOPs, or null.
const ArgSpec* calibration_spec(const Op& op) {
  static const std::vector<ArgSpec> specs = builtin_specs();
  const ArgSpec* best = nullptr;
  for (const ArgSpec& spec : specs) {
    if (spec.op != op.name()) continue;
    if (std::find(spec.tags.begin(), spec.tags.end(), "smoke") == spec.tags.end()) continue;
    if (best == nullptr || op.flops(spec.args) > op.flops(best->args)) best = &spec;
  }
  return best;
}

std::string human_seconds(double s) {
  char text[32];
  if (s < 120) {
    std::snprintf(text, sizeof(text), "%.0f s", s);
  } else if (s < 7200) {
    std::snprintf(text, sizeof(text), "%.0f min", s / 60);
  } else {
    std::snprintf(text, sizeof(text), "%.1f h", s / 3600);
  }
  return text;
}

}  // namespace

std::optional<ReferenceEstimate> ReferenceEstimator::estimate(const Op& op, const BoundArgs& args,
                                                              const Implementation& reference,
                                                              const Device& device,
                                                              CaseRunner& runner) {
  const std::string name(op.name());
  auto it = rates_.find(name);
  if (it == rates_.end()) {
    Rate rate;
    const ArgSpec* spec = calibration_spec(op);
    if (spec != nullptr && op.flops(spec->args) > 0) {
      rate.calibration = name + "/" + spec->name;
      try {
        CaseSetup setup;
        setup.op = name;
        setup.args = spec->args;
        setup.device = device.id();
        runner.setup(setup);
        TimingOptions timing;  // one call past a warm-up: the estimate needs no precision
        timing.warmup_runs = 1;
        timing.min_samples = 1;
        timing.max_samples = 3;
        timing.min_time_s = 0;
        const TimeResult timed = runner.time(reference, nlohmann::json::object(), timing);
        if (timed.status == "ok" && !timed.samples.empty()) {
          const double best = *std::min_element(timed.samples.begin(), timed.samples.end());
          if (best > 0) rate.flops_per_s = op.flops(spec->args) / best;
        }
      } catch (const Interrupted&) {
        throw;
      } catch (const std::exception&) {
        rate.flops_per_s = 0;  // no estimate: the reference runs as before
      }
    }
    it = rates_.emplace(name, rate).first;
  }
  if (it->second.flops_per_s <= 0) return std::nullopt;
  ReferenceEstimate e;
  e.flops_per_s = it->second.flops_per_s;
  e.seconds = op.flops(args) / e.flops_per_s;
  e.calibration = it->second.calibration;
  return e;
}

std::string reference_skip_reason(const ReferenceEstimate& estimate, double limit_s) {
  char rate[32];
  std::snprintf(rate, sizeof(rate), "%.2f", estimate.flops_per_s * 1e-9);
  return "the portable reference would take about " + human_seconds(estimate.seconds) +
         " (over the " + human_seconds(limit_s) + " run timeout: the case's FLOPs at the " + rate +
         " GFLOP/s it ran " + estimate.calibration +
         "); the oracle checks the others; name --impl reference to run it";
}

}  // namespace tokamax
