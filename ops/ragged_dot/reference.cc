// ragged_dot: the portable reference as an implementation ("reference"), any dtype.
#include "ops/framework/errors.h"
#include "ops/ragged_dot/base.h"

namespace tokamax {
namespace {

class ReferenceRaggedDot final : public TypedImplementation<RaggedDotProblem, EmptyConfig> {
 public:
  std::string_view op_name() const override { return "ragged_dot"; }
  std::string_view name() const override { return "reference"; }
  Support supported_on(const DeviceInfo&) const override { return {}; }
  EmptyConfig heuristics_config(const RaggedDotProblem&, const DeviceInfo&) const override {
    return {};
  }
  std::vector<EmptyConfig> autotuning_configs(const RaggedDotProblem&,
                                              const DeviceInfo&) const override {
    return {EmptyConfig{}};
  }
  void run(const RaggedDotProblem& problem, const EmptyConfig&, const TensorMap& inputs,
           TensorMap& outputs) const override {
    HostTensor& out = outputs.at("out");
    // f64 outputs accumulate in f64; everything else in f32, as upstream's reference does.
    if (problem.out_dtype == DType::kF64) {
      ragged_dot_reference<double>(problem, inputs.at("lhs"), inputs.at("rhs"), out);
    } else {
      ragged_dot_reference<float>(problem, inputs.at("lhs"), inputs.at("rhs"), out);
    }
  }
};

}  // namespace

const Implementation& ragged_dot_reference_implementation() {
  static const ReferenceRaggedDot impl;
  return impl;
}

}  // namespace tokamax
