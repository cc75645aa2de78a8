// layer_norm: high-level API and the dispatch order of its implementations.
#include "ops/layer_norm/api.h"

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& layer_norm_cpu_implementation();
const Implementation& layer_norm_reference_implementation();
const Implementation& layer_norm_onednn_implementation();

// Fastest first; "auto" takes the first implementation that is supported and accepts the args.
// The vendor baseline comes after the reference (which accepts every valid args), so "auto"
// never picks it; it is listed for bench, verify and tune to run side by side.
template <>
std::vector<const Implementation*> ProblemOp<LayerNormProblem>::implementations() const {
  return {&layer_norm_cpu_implementation(), &layer_norm_reference_implementation(),
          &layer_norm_onednn_implementation()};
}

const LayerNormOp& layer_norm_op() {
  static const LayerNormOp op;
  return op;
}

void add_layer_norm_arguments(ApiCall& call, const Tensor& x, const Tensor* scale,
                              const Tensor* offset, const LayerNormOptions& options) {
  call.tensor("x", x).tensor("scale", scale).tensor("offset", offset);
  call.option("axis", options.axis)
      .option("epsilon", options.epsilon)
      .option("subtract_mean", options.subtract_mean);
  if (options.scale_offset != 0.0) call.option("scale_offset", options.scale_offset);
}

Tensor layer_norm(const Tensor& x, const Tensor* scale, const Tensor* offset,
                  const LayerNormOptions& options) {
  ApiCall call(layer_norm_op());
  add_layer_norm_arguments(call, x, scale, offset, options);
  return call.run(options.implementation, options.config).at("out");
}

}  // namespace tokamax
