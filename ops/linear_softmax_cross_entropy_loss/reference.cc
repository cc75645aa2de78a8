// linear_softmax_cross_entropy_loss: the portable reference as an implementation ("reference").
#include "ops/framework/errors.h"
#include "ops/linear_softmax_cross_entropy_loss/base.h"

namespace tokamax {
namespace {

class ReferenceLinearSoftmaxCrossEntropy final
    : public TypedImplementation<LinearSoftmaxCrossEntropyProblem, EmptyConfig> {
 public:
  std::string_view op_name() const override { return "linear_softmax_cross_entropy_loss"; }
  std::string_view name() const override { return "reference"; }
  Support supported_on(const DeviceInfo&) const override { return {}; }
  EmptyConfig heuristics_config(const LinearSoftmaxCrossEntropyProblem&,
                                const DeviceInfo&) const override {
    return {};
  }
  std::vector<EmptyConfig> autotuning_configs(const LinearSoftmaxCrossEntropyProblem&,
                                              const DeviceInfo&) const override {
    return {EmptyConfig{}};
  }
  void run(const LinearSoftmaxCrossEntropyProblem& p, const EmptyConfig&, const TensorMap& inputs,
           TensorMap& outputs) const override {
    // f32 accumulation, as upstream's XLA reference computes the logits and the softmax in f32.
    linear_softmax_cross_entropy_reference<float>(p, inputs.at("x"), inputs.at("labels"),
                                                  inputs.at("w"), outputs.at("loss"));
  }
};

}  // namespace

const Implementation& linear_softmax_cross_entropy_loss_reference_implementation() {
  static const ReferenceLinearSoftmaxCrossEntropy impl;
  return impl;
}

}  // namespace tokamax
