// layer_norm_vjp: high-level API and the dispatch order of its implementations.
#include "ops/layer_norm/vjp/api.h"

#include "ops/framework/dispatch.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& layer_norm_vjp_cpu_implementation();
const Implementation& layer_norm_vjp_reference_implementation();
const Implementation& layer_norm_vjp_onednn_implementation();

// Fastest first; "auto" takes the first implementation that is supported and accepts the args.
// The vendor baseline comes after the reference (which accepts every valid args), so "auto"
// never picks it; it is listed for bench, verify and tune to run side by side.
template <>
std::vector<const Implementation*> ProblemOp<LayerNormVjpProblem>::implementations() const {
  return {&layer_norm_vjp_cpu_implementation(), &layer_norm_vjp_reference_implementation(),
          &layer_norm_vjp_onednn_implementation()};
}

const LayerNormVjpOp& layer_norm_vjp_op() {
  static const LayerNormVjpOp op;
  return op;
}

LayerNormGradients layer_norm_vjp(const Tensor& x, const Tensor* scale, const Tensor* offset,
                                  const Tensor& dout, const LayerNormOptions& options) {
  ApiCall call(layer_norm_vjp_op());
  add_layer_norm_arguments(call, x, scale, offset, options);
  call.tensor("dout", dout);
  TensorMap outputs = call.run(options.implementation, options.config);
  LayerNormGradients grads;
  grads.dx = outputs.at("dx");
  if (scale != nullptr) grads.dscale = outputs.at("dscale");
  if (offset != nullptr) grads.doffset = outputs.at("doffset");
  return grads;
}

}  // namespace tokamax
