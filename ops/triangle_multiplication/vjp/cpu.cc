// triangle_multiplication_vjp: the CPU implementation class ("cpu"), the phases of cpu_kernel.h
// on the forward's config (the same GEMM blocking and position tiles).
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/framework/op.h"
#include "ops/triangle_multiplication/cpu_config.h"
#include "ops/triangle_multiplication/vjp/base.h"
#include "ops/triangle_multiplication/vjp/cpu_kernel.h"

namespace tokamax {
namespace {

class CpuTriangleMultiplicationVjp final
    : public TypedImplementation<TriangleVjpProblem, CpuTriangleConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const TriangleVjpProblem&, const CpuTriangleConfig& c,
                    const Device& device) const override {
    check_triangle_config(c, device);
  }
  CpuTriangleConfig heuristics_config(const TriangleVjpProblem& p,
                                      const Device& device) const override {
    return cpu_triangle_heuristics_config(p.fwd, device);
  }
  std::vector<CpuTriangleConfig> autotuning_configs(const TriangleVjpProblem& p,
                                                    const Device& device) const override {
    return cpu_triangle_autotuning_configs(p.fwd, device);
  }
  void run(const TriangleVjpProblem& p, const CpuTriangleConfig& config, const Device&,
           const TensorMap& inputs, TensorMap& outputs) const override {
    triangle_multiplication_vjp_cpu_kernel(p, config, inputs, outputs);
  }
};

}  // namespace

const Implementation& triangle_multiplication_vjp_cpu_implementation() {
  static const CpuTriangleMultiplicationVjp impl;
  return impl;
}

}  // namespace tokamax
