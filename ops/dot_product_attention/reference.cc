// dot_product_attention: the portable reference as an implementation ("reference"), any dtype.
#include "ops/dot_product_attention/base.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

const HostTensor* optional_input(const TensorMap& inputs, const char* name) {
  auto it = inputs.find(name);
  return it == inputs.end() ? nullptr : &it->second;
}

class ReferenceDotProductAttention final
    : public TypedImplementation<AttentionProblem, EmptyConfig> {
 public:
  std::string_view op_name() const override { return "dot_product_attention"; }
  std::string_view name() const override { return "reference"; }
  Support supported_on(const DeviceInfo&) const override { return {}; }
  EmptyConfig heuristics_config(const AttentionProblem&, const DeviceInfo&) const override {
    return {};
  }
  std::vector<EmptyConfig> autotuning_configs(const AttentionProblem&,
                                              const DeviceInfo&) const override {
    return {EmptyConfig{}};
  }
  void run(const AttentionProblem& problem, const EmptyConfig&, const TensorMap& inputs,
           TensorMap& outputs) const override {
    HostTensor& out = outputs.at("out");
    const HostTensor* bias = optional_input(inputs, "bias");
    const HostTensor* mask = optional_input(inputs, "mask");
    // Softmax in >= f32: f32 for 16-bit and f32 inputs, f64 for f64 inputs.
    if (problem.dtype == DType::kF64) {
      dot_product_attention_reference<double>(problem, inputs.at("q"), inputs.at("k"),
                                              inputs.at("v"), bias, mask, out);
    } else {
      dot_product_attention_reference<float>(problem, inputs.at("q"), inputs.at("k"),
                                             inputs.at("v"), bias, mask, out);
    }
  }
};

}  // namespace

const Implementation& dot_product_attention_reference_implementation() {
  static const ReferenceDotProductAttention impl;
  return impl;
}

}  // namespace tokamax
