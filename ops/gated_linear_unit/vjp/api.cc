// gated_linear_unit_vjp: high-level API and the dispatch order of its implementations.
#include "ops/gated_linear_unit/vjp/api.h"

#include <vector>

#include "ops/framework/dispatch.h"

namespace tokamax {

// Defined in the vjp_* implementation files of this folder.
const Implementation& gated_linear_unit_vjp_cpu_implementation();
const Implementation& gated_linear_unit_vjp_reference_implementation();
const Implementation& gated_linear_unit_vjp_onednn_implementation();

// Fastest first; the vendor composite after the reference, so "auto" never picks it.
template <>
std::vector<const Implementation*> ProblemOp<GluVjpProblem>::implementations() const {
  return {&gated_linear_unit_vjp_cpu_implementation(),
          &gated_linear_unit_vjp_reference_implementation(),
          &gated_linear_unit_vjp_onednn_implementation()};
}

const GatedLinearUnitVjpOp& gated_linear_unit_vjp_op() {
  static const GatedLinearUnitVjpOp op;
  return op;
}

GluGradients gated_linear_unit_vjp(const Tensor& x, const Tensor& weights, const Tensor& dout,
                                   const GatedLinearUnitVjpOptions& options) {
  ApiCall call(gated_linear_unit_vjp_op());
  call.tensor("x", x).tensor("weights", weights).tensor("dout", dout);
  call.option("activation", std::string(activation_name(options.activation)));
  TensorMap outputs = call.run(options.implementation, options.config);
  return {outputs.at("dx"), outputs.at("dweights")};
}

}  // namespace tokamax
