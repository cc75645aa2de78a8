// gated_linear_unit: high-level API and the dispatch order of its implementations.
#include "ops/gated_linear_unit/api.h"

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& gated_linear_unit_cpu_implementation();
const Implementation& gated_linear_unit_reference_implementation();
const Implementation& gated_linear_unit_onednn_implementation();

// Fastest first; "auto" takes the first implementation that is supported and accepts the args.
// The vendor baseline comes after the reference (which accepts every valid args), so "auto"
// never picks it; it is listed for bench, verify and tune to run side by side.
std::vector<const Implementation*> GatedLinearUnitOp::implementations() const {
  return {&gated_linear_unit_cpu_implementation(), &gated_linear_unit_reference_implementation(),
          &gated_linear_unit_onednn_implementation()};
}

const GatedLinearUnitOp& gated_linear_unit_op() {
  static const GatedLinearUnitOp op;
  return op;
}

Tensor gated_linear_unit(const Tensor& x, const Tensor& weights,
                         const GatedLinearUnitOptions& options) {
  const nlohmann::json args = {{"x", x.spec().to_string()},
                               {"weights", weights.spec().to_string()},
                               {"activation", std::string(activation_name(options.activation))}};
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  const BoundArgs bound = op.bind(args);
  TensorMap inputs;
  inputs.emplace("x", x);
  inputs.emplace("weights", weights);
  TensorMap outputs = op.allocate_outputs(bound);
  dispatch(op, bound, options.implementation, options.config, inputs, outputs);
  return outputs.at("out");
}

}  // namespace tokamax
