// triangle_multiplication: the high-level C++ API.
//
// Dimensions.
//   N, C, H, D   as in base.h
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/tensor.h"
#include "ops/triangle_multiplication/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const TriangleMultiplicationOp& triangle_multiplication_op();

struct TriangleMultiplicationOptions {
  double epsilon = 1e-6;
  // "auto" picks the first implementation supported for these args; a name runs exactly that.
  std::string implementation = "auto";
  std::optional<nlohmann::json> config = std::nullopt;  // explicit config (a named implementation)
};

// The update (base.h): [N, N, D] in x's dtype. `weights` holds the eight weights and norms by
// upstream's names (kTriangleWeights). Throws InvalidArgument naming the argument on bad shapes
// or dtypes, or a triangle_type other than "incoming" / "outgoing".
Tensor triangle_multiplication(const Tensor& x,     // [N, N, C] f32, bf16 or f16
                               const Tensor& mask,  // [N, N] bool
                               const TensorMap& weights, const std::string& triangle_type,
                               const TriangleMultiplicationOptions& options = {});

}  // namespace tokamax
