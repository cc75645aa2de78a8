// gated_linear_unit_vjp: the high-level entry point, tokamax::gated_linear_unit_vjp(x, weights,
// dout, options): the gradients of gated_linear_unit's inputs.
//
// Dimensions.
//   M      rows of x, *B flattened
//   K      contraction extent
//   N      output features
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/common/activation.h"
#include "ops/framework/tensor.h"
#include "ops/gated_linear_unit/vjp/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const GatedLinearUnitVjpOp& gated_linear_unit_vjp_op();

struct GatedLinearUnitVjpOptions {
  Activation activation = Activation::kNone;  // the forward's
  // "auto" picks the first implementation supported here; a name runs exactly that one.
  std::string implementation = "auto";
  std::optional<nlohmann::json> config;  // explicit config (needs a named implementation)
};

struct GluGradients {
  Tensor dx;        // x's spec
  Tensor dweights;  // [K, 2, N] the weights' dtype
};

// The gradients of gated_linear_unit(x, weights) for the cotangent dout of its output. Throws
// InvalidArgument naming the argument when shapes or dtypes disagree.
GluGradients gated_linear_unit_vjp(const Tensor& x,        // [*B, M, K]
                                   const Tensor& weights,  // [K, 2, N]
                                   const Tensor& dout,     // [*B, M, N] x's dtype
                                   const GatedLinearUnitVjpOptions& options = {});

}  // namespace tokamax
