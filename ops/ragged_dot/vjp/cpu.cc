// ragged_dot_vjp: the CPU implementation class ("cpu"): support, checks, launch.
//
// Dimensions: as cpu_config.h.
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_checks.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/vjp/base.h"
#include "ops/ragged_dot/vjp/cpu_config.h"
#include "ops/ragged_dot/vjp/cpu_kernel.h"
#include "ops/ragged_dot/vjp/precision.h"

namespace tokamax {
namespace {

class CpuRaggedDotVjp final
    : public TypedImplementation<RaggedDotVjpProblem, CpuRaggedDotVjpConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override {
    return {{"simd_target", cpu::simd_target_name()}, {"native_bf16", gemm_has_native_bf16()}};
  }

  void check(const RaggedDotVjpProblem& p, const Device&) const override {
    for (DType dtype : {p.fwd.lhs_dtype, p.fwd.rhs_dtype, p.dout_dtype}) {
      if (dtype == DType::kF64) {
        throw NotImplemented(
            "cpu: f64 operands; the kernel accumulates in f32, which would drop their precision "
            "(the reference runs f64)");
      }
    }
  }

  // A precision preset runs as passes on pieces (precision.h): configs are checked, chosen
  // and run for the problem of a pass.
  void check_config(const RaggedDotVjpProblem& given, const CpuRaggedDotVjpConfig& c,
                    const Device& device) const override {
    const RaggedDotVjpProblem p = vjp_computed(given);
    require_num_threads(c.num_threads, device);
    require_micro_tile(c.mr, c.nr);
    require_bf16_path(c.bf16_path, is_bf16_vjp_problem(p), "bf16 lhs, rhs and dout");
  }

  CpuRaggedDotVjpConfig heuristics_config(const RaggedDotVjpProblem& p,
                                          const Device& device) const override {
    return cpu_ragged_dot_vjp_heuristics_config(vjp_computed(p), device);
  }
  std::vector<CpuRaggedDotVjpConfig> autotuning_configs(const RaggedDotVjpProblem& p,
                                                        const Device& device) const override {
    return cpu_ragged_dot_vjp_autotuning_configs(vjp_computed(p), device);
  }

  void run(const RaggedDotVjpProblem& p, const CpuRaggedDotVjpConfig& config, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    run_ragged_dot_vjp(p, inputs, outputs,
                       [&](const RaggedDotVjpProblem& q, const TensorMap& in, TensorMap& out) {
                         ragged_dot_vjp_cpu_kernel(q, config, in.at("lhs"), in.at("rhs"),
                                                   in.at("dout"), out.at("dlhs"), out.at("drhs"));
                       });
  }
};

}  // namespace

const Implementation& ragged_dot_vjp_cpu_implementation() {
  static const CpuRaggedDotVjp impl;
  return impl;
}

}  // namespace tokamax
