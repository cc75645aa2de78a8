// Tests for the portable reference's time estimate and verify's skip of a reference that would
// outlast the run timeout (cli/toolkit/harness/reference_estimate.h).
#include "cli/toolkit/harness/reference_estimate.h"

#include <catch2/catch.hpp>

#include "backends/cpu/cpu_device.h"
#include "cli/toolkit/harness/local_runner.h"
#include "cli/toolkit/harness/verifier.h"
#include "ops/ragged_dot/api.h"

using namespace tokamax;

namespace {

// 2 * 1024^3 FLOPs: above the gigaflop under which verify never calibrates.
ArgSpec large_case() {
  ArgSpec spec;
  spec.op = "ragged_dot";
  spec.name = "large";
  spec.args = ragged_dot_op().bind(
      {{"lhs", "f32[1024,1024]"}, {"rhs", "f32[1,1024,1024]"}, {"group_sizes", {1024}}});
  return spec;
}

}  // namespace

TEST_CASE("the reference's estimate scales its measured rate on a smoke spec by FLOPs",
          "[reference_estimate]") {
  const Op& op = ragged_dot_op();
  const Implementation& reference = op.implementation("reference");
  LocalRunner runner;
  ReferenceEstimator estimator;
  const ArgSpec large = large_case();
  const std::optional<ReferenceEstimate> e =
      estimator.estimate(op, large.args, reference, cpu::host_device(), runner);
  REQUIRE(e.has_value());
  CHECK(e->flops_per_s > 0);
  CHECK(e->seconds == Approx(op.flops(large.args) / e->flops_per_s));
  CHECK_THAT(e->calibration, Catch::StartsWith("ragged_dot/smoke_"));
  // Measured once per op: a second case reuses the rate.
  const BoundArgs twice = ragged_dot_op().bind(
      {{"lhs", "f32[2048,1024]"}, {"rhs", "f32[1,1024,1024]"}, {"group_sizes", {2048}}});
  const std::optional<ReferenceEstimate> e2 =
      estimator.estimate(op, twice, reference, cpu::host_device(), runner);
  REQUIRE(e2.has_value());
  CHECK(e2->flops_per_s == e->flops_per_s);
  CHECK(e2->seconds == Approx(2 * e->seconds));
  CHECK_THAT(reference_skip_reason(*e2, 1.0),
             Catch::Contains("would take about") && Catch::Contains("--impl reference"));
}

TEST_CASE("verify skips a reference that would outlast the run timeout, never passing it",
          "[reference_estimate]") {
  const Op& op = ragged_dot_op();
  const std::vector<const Implementation*> impls = {&op.implementation("cpu"),
                                                    &op.implementation("reference")};
  ReferenceEstimator estimator;
  VerifyOptions options;
  options.reference_estimator = &estimator;
  options.reference_limit_s = 1e-6;
  std::vector<std::string> steps;
  options.on_step = [&](const std::string& step) { steps.push_back(step); };
  const std::vector<VerifyRecord> records = verify_case(large_case(), impls, options);
  REQUIRE(records.size() == 2);
  CHECK(records[0].impl == "cpu");
  CHECK(records[0].disposition == Disposition::kPassed);
  CHECK(records[1].impl == "reference");
  CHECK(records[1].disposition == Disposition::kSkipped);
  CHECK(records[1].comparison.sampled == 0);
  CHECK_THAT(records[1].reason, Catch::Contains("would take about"));
  // The progress steps: the estimate, the case, then the implementation that ran.
  CHECK(steps ==
        std::vector<std::string>{"estimating the reference's time", "inputs and oracle", "cpu"});

  // Without a limit (the user named --impl reference) it runs and passes.
  options.reference_limit_s = 0;
  const std::vector<VerifyRecord> named = verify_case(large_case(), impls, options);
  CHECK(named[1].disposition == Disposition::kPassed);
  // Under a GFLOP nothing is estimated, whatever the limit.
  options.reference_limit_s = 1e-6;
  ArgSpec small = large_case();
  small.args =
      ragged_dot_op().bind({{"lhs", "f32[64,64]"}, {"rhs", "f32[1,64,64]"}, {"group_sizes", {64}}});
  CHECK(verify_case(small, impls, options)[1].disposition == Disposition::kPassed);
}
