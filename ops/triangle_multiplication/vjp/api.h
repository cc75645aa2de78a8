// triangle_multiplication_vjp: the high-level entry point, tokamax::triangle_multiplication_vjp:
// the gradients of triangle_multiplication's inputs.
//
// Dimensions.
//   N, C, H, D   as ops/triangle_multiplication/base.h
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/tensor.h"
#include "ops/triangle_multiplication/vjp/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const TriangleMultiplicationVjpOp& triangle_multiplication_vjp_op();

struct TriangleMultiplicationVjpOptions {
  double epsilon = 1e-6;  // the forward's
  // "auto" picks the first implementation supported here; a name runs exactly that one.
  std::string implementation = "auto";
  std::optional<nlohmann::json> config;  // explicit config (needs a named implementation)
};

// The gradients of triangle_multiplication(x, mask, weights, triangle_type) for the cotangent
// dout [N, N, D] (x's dtype) of its output: "dx" and "d<name>" for each of kTriangleWeights,
// each in its input's spec. Throws InvalidArgument naming the argument when shapes or dtypes
// disagree.
TensorMap triangle_multiplication_vjp(const Tensor& x,     // [N, N, C]
                                      const Tensor& mask,  // [N, N] bool
                                      const TensorMap& weights, const std::string& triangle_type,
                                      const Tensor& dout,  // [N, N, D]
                                      const TriangleMultiplicationVjpOptions& options = {});

}  // namespace tokamax
