// gated_linear_unit: the portable reference as an implementation ("reference"), any dtype.
#include "ops/framework/errors.h"
#include "ops/gated_linear_unit/base.h"

namespace tokamax {
namespace {

class ReferenceGatedLinearUnit final : public TypedImplementation<GluProblem, EmptyConfig> {
 public:
  std::string_view op_name() const override { return "gated_linear_unit"; }
  std::string_view name() const override { return "reference"; }
  Support supported_on(const DeviceInfo&) const override { return {}; }
  EmptyConfig heuristics_config(const GluProblem&, const DeviceInfo&) const override { return {}; }
  std::vector<EmptyConfig> autotuning_configs(const GluProblem&, const DeviceInfo&) const override {
    return {EmptyConfig{}};
  }
  void run(const GluProblem& problem, const EmptyConfig&, const TensorMap& inputs,
           TensorMap& outputs) const override {
    HostTensor& out = outputs.at("out");
    // f64 outputs accumulate in f64; everything else in f32, as upstream's reference does.
    if (problem.out_dtype() == DType::kF64) {
      gated_linear_unit_reference<double>(problem, inputs.at("x"), inputs.at("weights"), out);
    } else {
      gated_linear_unit_reference<float>(problem, inputs.at("x"), inputs.at("weights"), out);
    }
  }
};

}  // namespace

const Implementation& gated_linear_unit_reference_implementation() {
  static const ReferenceGatedLinearUnit impl;
  return impl;
}

}  // namespace tokamax
