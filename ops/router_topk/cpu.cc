// router_topk: the CPU implementation class ("cpu"): the row selection engine of ops/common with
// scores clamped to the floor, then the weights.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/row_select.h"
#include "ops/framework/op.h"
#include "ops/router_topk/base.h"

namespace tokamax {
namespace {

class CpuRouterTopK final : public TypedImplementation<RouterTopKProblem, RowSelectConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const RouterTopKProblem&, const RowSelectConfig& c,
                    const Device& device) const override {
    check_row_select_config(c, device);
  }
  RowSelectConfig heuristics_config(const RouterTopKProblem& p,
                                    const Device& device) const override {
    return row_select_heuristics_config(p.T, p.E, p.k, device);
  }
  std::vector<RowSelectConfig> autotuning_configs(const RouterTopKProblem& p,
                                                  const Device& device) const override {
    return row_select_autotuning_configs(p.T, p.E, p.k, device);
  }

  void run(const RouterTopKProblem& p, const RowSelectConfig& config, const Device&,
           const TensorMap& inputs, TensorMap& outputs) const override {
    const RowSelectProblem select{.b = p.T,
                                  .n = p.E,
                                  .k = p.k,
                                  .dtype = p.dtype,
                                  .rule = RowSelectRule::kClampToFloor,
                                  .floor = kRouterFloor,
                                  .row_lengths = nullptr};
    float* weights = outputs.at("weights").data<float>();
    row_select_cpu(select, config, inputs.at("scores").raw(), outputs.at("indices").data<int32_t>(),
                   weights);
    // The weights: the selected scores clamped; NaN for a row without a real score.
    for (int64_t t = 0; t < p.T; ++t) {
      float* w = weights + t * p.k;
      for (int64_t j = 0; j < p.k; ++j) w[j] = router_clamp(w[j]);
      if (w[0] <= kRouterFloor) {  // k >= 1 (bind)
        std::fill_n(w, p.k, std::numeric_limits<float>::quiet_NaN());
      }
    }
  }
};

}  // namespace

const Implementation& router_topk_cpu_implementation() {
  static const CpuRouterTopK impl;
  return impl;
}

}  // namespace tokamax
