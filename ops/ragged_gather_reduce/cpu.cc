// ragged_gather_reduce: the CPU implementation class ("cpu"): the gather-reduce of ops/common.
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/row_gather.h"
#include "ops/framework/op.h"
#include "ops/ragged_gather_reduce/base.h"

namespace tokamax {
namespace {

class CpuRaggedGatherReduce final
    : public TypedImplementation<RaggedGatherReduceProblem, RowGatherConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const RaggedGatherReduceProblem&, const RowGatherConfig& c,
                    const Device& device) const override {
    check_row_gather_config(c, device);
  }
  RowGatherConfig heuristics_config(const RaggedGatherReduceProblem& p,
                                    const Device& device) const override {
    return row_gather_heuristics_config(shape(p), device);
  }
  std::vector<RowGatherConfig> autotuning_configs(const RaggedGatherReduceProblem& p,
                                                  const Device& device) const override {
    return row_gather_autotuning_configs(shape(p), device);
  }

  void run(const RaggedGatherReduceProblem& p, const RowGatherConfig& config, const Device&,
           const TensorMap& inputs, TensorMap& outputs) const override {
    gather_reduce_rows_cpu(
        {.T = p.T(), .g = p.g, .h = p.h, .x_dtype = p.x_dtype, .weights_dtype = p.weights_dtype},
        config, inputs.at("x").raw(), inputs.at("indices").data<int32_t>(),
        inputs.at("topk_weights").raw(), inputs.at("valid_rows_mask").data<bool>(),
        outputs.at("out").raw());
  }

 private:
  // Per token: its g source rows read (all of them, at most), one row written.
  static RowGatherShape shape(const RaggedGatherReduceProblem& p) {
    const int64_t row_bytes = p.h * static_cast<int64_t>(dtype_size(p.x_dtype));
    return {.rows = p.T(), .read_bytes_per_row = p.g * row_bytes, .row_bytes = row_bytes};
  }
};

}  // namespace

const Implementation& ragged_gather_reduce_cpu_implementation() {
  static const CpuRaggedGatherReduce impl;
  return impl;
}

}  // namespace tokamax
