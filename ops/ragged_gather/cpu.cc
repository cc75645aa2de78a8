// ragged_gather: the CPU implementation class ("cpu"): the row gather of ops/common.
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/row_gather.h"
#include "ops/framework/op.h"
#include "ops/ragged_gather/base.h"

namespace tokamax {
namespace {

class CpuRaggedGather final : public TypedImplementation<RaggedGatherProblem, RowGatherConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const RaggedGatherProblem&, const RowGatherConfig& c,
                    const Device& device) const override {
    check_row_gather_config(c, device);
  }
  RowGatherConfig heuristics_config(const RaggedGatherProblem& p,
                                    const Device& device) const override {
    return row_gather_heuristics_config(shape(p), device);
  }
  std::vector<RowGatherConfig> autotuning_configs(const RaggedGatherProblem& p,
                                                  const Device& device) const override {
    return row_gather_autotuning_configs(shape(p), device);
  }

  void run(const RaggedGatherProblem& p, const RowGatherConfig& config, const Device&,
           const TensorMap& inputs, TensorMap& outputs) const override {
    gather_rows_cpu({.first = p.start, .last = p.end, .row_bytes = p.row_bytes()}, config,
                    inputs.at("x").raw(), inputs.at("indices").data<int32_t>(),
                    outputs.at("out").raw());
  }

 private:
  static RowGatherShape shape(const RaggedGatherProblem& p) {
    return {
        .rows = p.end - p.start, .read_bytes_per_row = p.row_bytes(), .row_bytes = p.row_bytes()};
  }
};

}  // namespace

const Implementation& ragged_gather_cpu_implementation() {
  static const CpuRaggedGather impl;
  return impl;
}

}  // namespace tokamax
