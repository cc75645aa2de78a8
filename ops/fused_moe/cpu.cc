// fused_moe: the CPU implementation class ("cpu"): the router, then the fused layer of
// cpu_kernel.h.
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/fused_moe/base.h"
#include "ops/fused_moe/cpu_config.h"
#include "ops/fused_moe/cpu_kernel.h"
#include "ops/fused_moe/routing.h"

namespace tokamax {
namespace {

class CpuFusedMoe final : public TypedImplementation<FusedMoeProblem, CpuFusedMoeConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const FusedMoeProblem& p, const CpuFusedMoeConfig& c,
                    const Device& device) const override {
    check_fused_moe_config(p, c, device);
  }
  CpuFusedMoeConfig heuristics_config(const FusedMoeProblem& p,
                                      const Device& device) const override {
    return cpu_fused_moe_heuristics_config(p, device);
  }
  std::vector<CpuFusedMoeConfig> autotuning_configs(const FusedMoeProblem& p,
                                                    const Device& device) const override {
    return cpu_fused_moe_autotuning_configs(p, device);
  }

  void run(const FusedMoeProblem& p, const CpuFusedMoeConfig& config, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    const MoeRouting routing = route_tokens(p, inputs.at("gating"), device, config.num_threads);
    fused_moe_cpu_kernel(p, config, routing, inputs.at("x"), inputs.at("w1"), inputs.at("w2"),
                         find_tensor(inputs, "w1_bias"), find_tensor(inputs, "w2_bias"),
                         find_tensor(inputs, "w1_scale"), find_tensor(inputs, "w2_scale"),
                         outputs.at("out"));
  }
};

}  // namespace

const Implementation& fused_moe_cpu_implementation() {
  static const CpuFusedMoe impl;
  return impl;
}

}  // namespace tokamax
