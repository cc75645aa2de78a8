// gated_delta_rule: the op object, its implementations and the C++ entry point.
#include "ops/gated_delta_rule/api.h"

#include <vector>

#include "ops/framework/dispatch.h"

namespace tokamax {

const Implementation& gated_delta_rule_cpu_implementation();
const Implementation& gated_delta_rule_reference_implementation();

template <>
std::vector<const Implementation*> ProblemOp<GdnProblem>::implementations() const {
  return {&gated_delta_rule_cpu_implementation(), &gated_delta_rule_reference_implementation()};
}

const GdnOp& gated_delta_rule_op() {
  static const GdnOp op;
  return op;
}

TensorMap gated_delta_rule(const Tensor& qkv, const Tensor& b, const Tensor& a,
                           const Tensor& conv_state, const Tensor& recurrent_state,
                           const Tensor& conv_weight, const Tensor& a_log, const Tensor& dt_bias,
                           const GdnOptions& options) {
  ApiCall call(gated_delta_rule_op());
  call.tensor("qkv", qkv).tensor("b", b).tensor("a", a).tensor("conv_state", conv_state);
  call.tensor("recurrent_state", recurrent_state).tensor("conv_weight", conv_weight);
  call.tensor("a_log", a_log).tensor("dt_bias", dt_bias);
  for (const auto& [name, tensor] : options.tensors) call.tensor(name, tensor);
  for (const auto& [name, value] : options.args.items()) call.option(name, value);
  return call.run(options.implementation, options.config);
}

}  // namespace tokamax
