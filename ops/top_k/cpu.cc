// top_k: the CPU implementation class ("cpu"): config and launch.
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/framework/op.h"
#include "ops/top_k/base.h"
#include "ops/top_k/cpu_config.h"
#include "ops/top_k/cpu_kernel.h"

namespace tokamax {
namespace {

class CpuTopK final : public TypedImplementation<TopKProblem, CpuTopKConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const TopKProblem& p, const CpuTopKConfig& c,
                    const Device& device) const override {
    check_top_k_config(p, c, device);
  }
  CpuTopKConfig heuristics_config(const TopKProblem& p, const Device& device) const override {
    return cpu_top_k_heuristics_config(p, device);
  }
  std::vector<CpuTopKConfig> autotuning_configs(const TopKProblem& p,
                                                const Device& device) const override {
    return cpu_top_k_autotuning_configs(p, device);
  }

  void run(const TopKProblem& p, const CpuTopKConfig& config, const Device&,
           const TensorMap& inputs, TensorMap& outputs) const override {
    auto lengths = inputs.find("row_lengths");
    auto bits = outputs.find("scores_bits");
    const CpuTopKLaunch launch{config.rows_per_task, config.num_threads, config.radix_select};
    top_k_cpu_kernel(p, launch, static_cast<const float*>(inputs.at("scores").raw()),
                     lengths == inputs.end() ? nullptr : lengths->second.data<int32_t>(),
                     outputs.at("indices").data<int32_t>(),
                     bits == outputs.end() ? nullptr : bits->second.data<int32_t>());
  }
};

}  // namespace

const Implementation& top_k_cpu_implementation() {
  static const CpuTopK impl;
  return impl;
}

}  // namespace tokamax
