// ragged_paged_attention: the CPU implementation class ("cpu"), cpu_kernel.h's tasks.
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/framework/op.h"
#include "ops/ragged_paged_attention/base.h"
#include "ops/ragged_paged_attention/cpu_config.h"
#include "ops/ragged_paged_attention/cpu_kernel.h"

namespace tokamax {
namespace {

class CpuRaggedPagedAttention final
    : public TypedImplementation<RaggedPagedAttentionProblem, CpuRpaConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const RaggedPagedAttentionProblem& p, const CpuRpaConfig& c,
                    const Device& device) const override {
    check_rpa_config(p, c, device);
  }
  CpuRpaConfig heuristics_config(const RaggedPagedAttentionProblem& p,
                                 const Device& device) const override {
    return cpu_rpa_heuristics_config(p, device);
  }
  std::vector<CpuRpaConfig> autotuning_configs(const RaggedPagedAttentionProblem& p,
                                               const Device& device) const override {
    return cpu_rpa_autotuning_configs(p, device);
  }
  void run(const RaggedPagedAttentionProblem& p, const CpuRpaConfig& config, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    ragged_paged_attention_cpu_kernel(p, config, device, inputs, outputs);
  }
};

}  // namespace

const Implementation& ragged_paged_attention_cpu_implementation() {
  static const CpuRaggedPagedAttention impl;
  return impl;
}

}  // namespace tokamax
