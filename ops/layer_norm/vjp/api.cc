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
std::vector<const Implementation*> LayerNormVjpOp::implementations() const {
  return {&layer_norm_vjp_cpu_implementation(), &layer_norm_vjp_reference_implementation(),
          &layer_norm_vjp_onednn_implementation()};
}

const LayerNormVjpOp& layer_norm_vjp_op() {
  static const LayerNormVjpOp op;
  return op;
}

LayerNormGradients layer_norm_vjp(const Tensor& x, const Tensor* scale, const Tensor* offset,
                                  const Tensor& dout, const LayerNormOptions& options) {
  nlohmann::json args = {{"x", x.spec().to_string()},
                         {"dout", dout.spec().to_string()},
                         {"axis", options.axis},
                         {"epsilon", options.epsilon},
                         {"subtract_mean", options.subtract_mean}};
  if (scale != nullptr) args["scale"] = scale->spec().to_string();
  if (offset != nullptr) args["offset"] = offset->spec().to_string();
  if (options.scale_offset != 0.0) args["scale_offset"] = options.scale_offset;
  const LayerNormVjpOp& op = layer_norm_vjp_op();
  const BoundArgs bound = op.bind(args);
  TensorMap inputs;
  inputs.emplace("x", x);
  inputs.emplace("dout", dout);
  if (scale != nullptr) inputs.emplace("scale", *scale);
  if (offset != nullptr) inputs.emplace("offset", *offset);
  TensorMap outputs = op.allocate_outputs(bound);
  dispatch(op, bound, options.implementation, options.config, inputs, outputs);
  LayerNormGradients grads;
  grads.dx = outputs.at("dx");
  if (scale != nullptr) grads.dscale = outputs.at("dscale");
  if (offset != nullptr) grads.doffset = outputs.at("doffset");
  return grads;
}

}  // namespace tokamax
