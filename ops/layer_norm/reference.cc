// layer_norm: the portable reference as an implementation ("reference"), any dtype.
#include "ops/framework/errors.h"
#include "ops/layer_norm/base.h"

namespace tokamax {
namespace {

const HostTensor* optional_input(const TensorMap& inputs, const char* name) {
  auto it = inputs.find(name);
  return it == inputs.end() ? nullptr : &it->second;
}

class ReferenceLayerNorm final : public TypedImplementation<LayerNormProblem, EmptyConfig> {
 public:
  std::string_view op_name() const override { return "layer_norm"; }
  std::string_view name() const override { return "reference"; }
  Support supported_on(const DeviceInfo&) const override { return {}; }
  EmptyConfig heuristics_config(const LayerNormProblem&, const DeviceInfo&) const override {
    return {};
  }
  std::vector<EmptyConfig> autotuning_configs(const LayerNormProblem&,
                                              const DeviceInfo&) const override {
    return {EmptyConfig{}};
  }
  void run(const LayerNormProblem& problem, const EmptyConfig&, const TensorMap& inputs,
           TensorMap& outputs) const override {
    const HostTensor& x = inputs.at("x");
    const HostTensor* scale = optional_input(inputs, "scale");
    const HostTensor* offset = optional_input(inputs, "offset");
    HostTensor& out = outputs.at("out");
    // Statistics in f32 (as upstream's reference), in f64 for f64 x.
    if (problem.x_dtype == DType::kF64) {
      layer_norm_reference<double>(problem, x, scale, offset, out);
    } else {
      layer_norm_reference<float>(problem, x, scale, offset, out);
    }
  }
};

}  // namespace

const Implementation& layer_norm_reference_implementation() {
  static const ReferenceLayerNorm impl;
  return impl;
}

}  // namespace tokamax
