// layer_norm: the high-level entry point, tokamax::layer_norm(x, scale, offset, options).
//
// Dimensions.
//   C      x's extent along options.axis: the normalized extent (the length of scale, offset)
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/tensor.h"
#include "ops/layer_norm/base.h"

namespace tokamax {

class ApiCall;  // ops/framework/dispatch.h

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const LayerNormOp& layer_norm_op();

struct LayerNormOptions {
  // "auto" picks the first implementation supported on this machine for these args, falling back
  // on NotImplemented; a name ("cpu", "reference", "onednn") runs exactly that one or throws.
  std::string implementation = "auto";
  int axis = -1;              // the normalized axis; negative counts from the end
  double epsilon = 1e-6;      // added to the variance (mean square for RMSNorm)
  bool subtract_mean = true;  // false: RMSNorm, x * rsqrt(mean(x^2) + epsilon) * scale + offset
  double scale_offset = 0.0;  // added to scale before scaling (Gemma: 1 + scale); needs a scale
  std::optional<nlohmann::json> config;  // explicit config (needs a named implementation)
};

// out (x's shape and dtype) = (x - mean) * rsqrt(var + epsilon) * scale + offset along
// options.axis, statistics in f32 (f64 for f64 x). scale and offset are [C] or null (absent:
// 1 and 0). Throws InvalidArgument naming the argument when shapes or options disagree.
Tensor layer_norm(const Tensor& x,       // x's shape, any rank >= 1
                  const Tensor* scale,   // [C] or null
                  const Tensor* offset,  // [C] or null
                  const LayerNormOptions& options = {});

// Adds x, scale, offset and the options to a call of this op or of its VJP.
void add_layer_norm_arguments(ApiCall& call, const Tensor& x, const Tensor* scale,
                              const Tensor* offset, const LayerNormOptions& options);

}  // namespace tokamax
