// triangle_multiplication: the CPU implementation class ("cpu"), the three phases of
// cpu_kernel.h.
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/framework/op.h"
#include "ops/triangle_multiplication/base.h"
#include "ops/triangle_multiplication/cpu_config.h"
#include "ops/triangle_multiplication/cpu_kernel.h"

namespace tokamax {
namespace {

class CpuTriangleMultiplication final
    : public TypedImplementation<TriangleMultiplicationProblem, CpuTriangleConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const TriangleMultiplicationProblem&, const CpuTriangleConfig& c,
                    const Device& device) const override {
    check_triangle_config(c, device);
  }
  CpuTriangleConfig heuristics_config(const TriangleMultiplicationProblem& p,
                                      const Device& device) const override {
    return cpu_triangle_heuristics_config(p, device);
  }
  std::vector<CpuTriangleConfig> autotuning_configs(const TriangleMultiplicationProblem& p,
                                                    const Device& device) const override {
    return cpu_triangle_autotuning_configs(p, device);
  }
  void run(const TriangleMultiplicationProblem& p, const CpuTriangleConfig& config, const Device&,
           const TensorMap& inputs, TensorMap& outputs) const override {
    triangle_multiplication_cpu_kernel(p, config, inputs, outputs.at("out"));
  }
};

}  // namespace

const Implementation& triangle_multiplication_cpu_implementation() {
  static const CpuTriangleMultiplication impl;
  return impl;
}

}  // namespace tokamax
