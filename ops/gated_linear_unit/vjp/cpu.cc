// gated_linear_unit_vjp: the CPU implementation class ("cpu"): support, checks, launch.
//
// Dimensions: as cpu_config.h.
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_checks.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/gated_linear_unit/cpu_config.h"
#include "ops/gated_linear_unit/vjp/base.h"
#include "ops/gated_linear_unit/vjp/cpu_config.h"
#include "ops/gated_linear_unit/vjp/cpu_kernel.h"

namespace tokamax {
namespace {

class CpuGatedLinearUnitVjp final : public TypedImplementation<GluVjpProblem, CpuGluVjpConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override {
    return {{"simd_target", cpu::simd_target_name()}, {"native_bf16", gemm_has_native_bf16()}};
  }

  void check(const GluVjpProblem& p, const Device&) const override {
    if (p.fwd.x_dtype == DType::kF64 || p.fwd.w_dtype == DType::kF64) {
      throw NotImplemented(
          "cpu: f64 operands; the kernel accumulates in f32, which would drop their precision "
          "(the reference runs f64)");
    }
  }
  void check_config(const GluVjpProblem& p, const CpuGluVjpConfig& c,
                    const Device& device) const override {
    require_num_threads(c.num_threads, device);
    require_micro_tile(c.mr, c.nr);
    require_bf16_path(c.bf16_path, is_bf16_glu_problem(p.fwd), "bf16 x and bf16 weights");
  }
  CpuGluVjpConfig heuristics_config(const GluVjpProblem& p, const Device& device) const override {
    return cpu_glu_vjp_heuristics_config(p, device);
  }
  std::vector<CpuGluVjpConfig> autotuning_configs(const GluVjpProblem& p,
                                                  const Device& device) const override {
    return cpu_glu_vjp_autotuning_configs(p, device);
  }
  void run(const GluVjpProblem& p, const CpuGluVjpConfig& config, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    gated_linear_unit_vjp_cpu_kernel(p, config, inputs.at("x"), glu_weights(p.fwd, inputs),
                                     inputs.at("dout"), outputs.at("dx"),
                                     glu_weight_grads(p.fwd, outputs));
  }
};

}  // namespace

const Implementation& gated_linear_unit_vjp_cpu_implementation() {
  static const CpuGatedLinearUnitVjp impl;
  return impl;
}

}  // namespace tokamax
