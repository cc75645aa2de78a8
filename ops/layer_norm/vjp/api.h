// layer_norm_vjp: the high-level entry point, tokamax::layer_norm_vjp(x, scale, offset, dout).
//
// Dimensions.
//   C      x's extent along options.axis: the normalized extent (the length of scale, offset)
#pragma once

#include <optional>

#include "ops/framework/tensor.h"
#include "ops/layer_norm/api.h"
#include "ops/layer_norm/vjp/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const LayerNormVjpOp& layer_norm_vjp_op();

// The gradients of layer_norm(x, scale, offset, options) for the cotangent dout of its output.
struct LayerNormGradients {
  Tensor dx;                      // x's shape and dtype
  std::optional<Tensor> dscale;   // scale's spec, when a scale was given
  std::optional<Tensor> doffset;  // offset's spec, when an offset was given
};

// The VJP of tokamax::layer_norm with the same options (implementation names "cpu", "reference",
// "onednn"; "auto" picks the first that accepts the args; config needs a named one). Throws
// InvalidArgument naming the argument when shapes or options disagree (dout must have x's spec).
LayerNormGradients layer_norm_vjp(const Tensor& x,       // x's shape, any rank >= 1
                                  const Tensor* scale,   // [C] or null
                                  const Tensor* offset,  // [C] or null
                                  const Tensor& dout,    // x's shape and dtype
                                  const LayerNormOptions& options = {});

}  // namespace tokamax
