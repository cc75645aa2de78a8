// gated_linear_unit: the high-level entry point, tokamax::gated_linear_unit(x, weights, options).
//
// Dimensions.
//   B      leading batch extents of x (any number, possibly none)
//   M      rows of x (second-to-last extent)
//   K      contraction extent
//   N      output features
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/common/activation.h"
#include "ops/framework/tensor.h"
#include "ops/gated_linear_unit/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const GatedLinearUnitOp& gated_linear_unit_op();

struct GatedLinearUnitOptions {
  Activation activation = Activation::kNone;
  // Upstream's precision of both products (ops/common/precision.h, docs/precision.md).
  DotPrecision precision = DotPrecision::kDefault;
  // "auto" picks the first implementation supported on this machine for these args, falling back
  // on NotImplemented; a name ("cpu", "reference", "onednn") runs exactly that one or throws.
  std::string implementation = "auto";
  std::optional<nlohmann::json> config;  // explicit config (needs a named implementation)
};

// out[*B, M, N] = act(x @ weights[:, 0, :]) * (x @ weights[:, 1, :]), in x's dtype. Throws
// InvalidArgument naming the argument when shapes disagree.
Tensor gated_linear_unit(const Tensor& x,        // [*B, M, K]
                         const Tensor& weights,  // [K, 2, N]
                         const GatedLinearUnitOptions& options = {});

// The same with unfused weights: act(x @ gate_weights) * (x @ proj_weights).
Tensor gated_linear_unit(const Tensor& x,             // [*B, M, K]
                         const Tensor& gate_weights,  // [K, N]
                         const Tensor& proj_weights,  // [K, N]
                         const GatedLinearUnitOptions& options = {});

}  // namespace tokamax
