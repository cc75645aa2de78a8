// verify: how long the portable `reference` would take on a case, so that verify can skip it
// where that exceeds the run timeout (it is a correctness fallback, not meant for production
// shapes; the float64 oracle, which samples, still checks every other implementation).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "backends/device.h"
#include "cli/toolkit/harness/case_runner.h"
#include "ops/framework/op.h"

namespace tokamax {

struct ReferenceEstimate {
  double seconds = 0;       // the case's FLOPs at the measured rate
  double flops_per_s = 0;   // the reference's rate on the calibration spec
  std::string calibration;  // "<op>/<spec>"
};

// Measures each op's reference once per process on its calibration spec (the largest of the
// op's `smoke` specs: small, every op has them), through the verify command's runner, and
// scales by FLOPs. A reference that is not compute-bound on small shapes runs faster per FLOP
// there than on huge ones, so the estimate errs low: a case it skips is slower still.
class ReferenceEstimator {
 public:
  // nullopt where the op has no smoke spec or its calibration failed (then nothing is skipped).
  // Leaves `runner` set up on the calibration case: the caller sets up its own case after.
  std::optional<ReferenceEstimate> estimate(const Op& op, const BoundArgs& args,
                                            const Implementation& reference, const Device& device,
                                            CaseRunner& runner);

 private:
  struct Rate {
    double flops_per_s = 0;  // 0: calibration failed
    std::string calibration;
  };
  std::map<std::string, Rate> rates_;  // by op
};

// The reason verify gives for a reference it skips.
std::string reference_skip_reason(const ReferenceEstimate& estimate, double limit_s);

}  // namespace tokamax
