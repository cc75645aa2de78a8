// top_k: the CPU implementation class ("cpu"): the row selection engine of ops/common.
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/row_select.h"
#include "ops/framework/op.h"
#include "ops/top_k/base.h"

namespace tokamax {
namespace {

class CpuTopK final : public TypedImplementation<TopKProblem, RowSelectConfig> {
 public:
  std::string_view name() const override { return "cpu"; }
  nlohmann::json describe() const override { return {{"simd_target", cpu::simd_target_name()}}; }

  void check_config(const TopKProblem&, const RowSelectConfig& c,
                    const Device& device) const override {
    check_row_select_config(c, device);
  }
  RowSelectConfig heuristics_config(const TopKProblem& p, const Device& device) const override {
    return row_select_heuristics_config(p.b, p.n, p.k, device);
  }
  std::vector<RowSelectConfig> autotuning_configs(const TopKProblem& p,
                                                  const Device& device) const override {
    return row_select_autotuning_configs(p.b, p.n, p.k, device);
  }

  void run(const TopKProblem& p, const RowSelectConfig& config, const Device&,
           const TensorMap& inputs, TensorMap& outputs) const override {
    auto lengths = inputs.find("row_lengths");
    // i32 scores hold f32 bits: selected as f32 either way.
    const RowSelectProblem select{
        .b = p.b,
        .n = p.n,
        .k = p.k,
        .dtype = DType::kF32,
        .rule = RowSelectRule::kAboveNegInf,
        .floor = 0.0f,
        .row_lengths = lengths == inputs.end() ? nullptr : lengths->second.data<int32_t>()};
    int32_t* columns = outputs.at("indices").data<int32_t>();
    auto bits = outputs.find("scores_bits");
    if (bits == outputs.end()) {
      row_select_cpu(select, config, inputs.at("scores").raw(), columns);
      return;
    }
    // The selected scores' bits (-inf's past the eligible count), copied out of f32 values.
    std::vector<float> values(static_cast<size_t>(p.b * p.k));
    row_select_cpu(select, config, inputs.at("scores").raw(), columns, values.data());
    std::memcpy(bits->second.raw(), values.data(), values.size() * sizeof(float));
  }
};

}  // namespace

const Implementation& top_k_cpu_implementation() {
  static const CpuTopK impl;
  return impl;
}

}  // namespace tokamax
