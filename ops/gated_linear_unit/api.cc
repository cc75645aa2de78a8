// gated_linear_unit: high-level API and the dispatch order of its implementations.
#include "ops/gated_linear_unit/api.h"

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& gated_linear_unit_cpu_implementation();
const Implementation& gated_linear_unit_reference_implementation();
const Implementation& gated_linear_unit_onednn_implementation();
const Implementation& gated_linear_unit_mkl_implementation();

// Fastest first; "auto" takes the first implementation that is supported and accepts the args.
// The vendor baseline comes after the reference (which accepts every valid args), so "auto"
// never picks it; it is listed for bench, verify and tune to run side by side.
template <>
std::vector<const Implementation*> ProblemOp<GluProblem>::implementations() const {
  return {&gated_linear_unit_cpu_implementation(), &gated_linear_unit_reference_implementation(),
          &gated_linear_unit_onednn_implementation(), &gated_linear_unit_mkl_implementation()};
}

const GatedLinearUnitOp& gated_linear_unit_op() {
  static const GatedLinearUnitOp op;
  return op;
}

namespace {

// Binds x, the named weight tensors and the activation, then dispatches.
Tensor run_glu(const Tensor& x, const std::vector<std::pair<const char*, const Tensor*>>& weights,
               const GatedLinearUnitOptions& options) {
  ApiCall call(gated_linear_unit_op());
  call.tensor("x", x)
      .option("activation", std::string(activation_name(options.activation)))
      .option("precision", std::string(precision_name(options.precision)));
  for (const auto& [name, tensor] : weights) call.tensor(name, tensor);
  return call.run(options.implementation, options.config).at("out");
}

}  // namespace

Tensor gated_linear_unit(const Tensor& x, const Tensor& weights,
                         const GatedLinearUnitOptions& options) {
  return run_glu(x, {{"weights", &weights}}, options);
}

Tensor gated_linear_unit(const Tensor& x, const Tensor& gate_weights, const Tensor& proj_weights,
                         const GatedLinearUnitOptions& options) {
  return run_glu(x, {{"gate_weights", &gate_weights}, {"proj_weights", &proj_weights}}, options);
}

}  // namespace tokamax
