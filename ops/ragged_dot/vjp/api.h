// ragged_dot_vjp: the high-level entry point, tokamax::ragged_dot_vjp(lhs, rhs, group_sizes,
// dout, options): the gradients of ragged_dot's inputs.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens)
//   K      contraction extent
//   N      columns of rhs and of the forward output
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/dtype.h"
#include "ops/framework/tensor.h"
#include "ops/ragged_dot/vjp/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const RaggedDotVjpOp& ragged_dot_vjp_op();

struct RaggedDotVjpOptions {
  // "auto" picks the first implementation supported here for these args; a name ("cpu",
  // "reference", "onednn") runs exactly that one or throws.
  std::string implementation = "auto";
  // The forward's output type (dout must be of it): default the inputs' common type.
  std::optional<DType> preferred_element_type;
  std::optional<int64_t> group_offset;   // the forward's shard (ops/ragged_dot/base.h)
  std::optional<nlohmann::json> config;  // explicit config (needs a named implementation)
};

struct RaggedDotGradients {
  Tensor dlhs;  // [M, K] lhs's dtype
  Tensor drhs;  // [G, K, N] rhs's dtype
};

// The gradients of ragged_dot(lhs, rhs, group_sizes) for the cotangent dout of its output.
// Throws InvalidArgument naming the argument when shapes, sizes or dtypes disagree.
RaggedDotGradients ragged_dot_vjp(const Tensor& lhs,          // [M, K]
                                  const Tensor& rhs,          // [G, K, N]
                                  const Tensor& group_sizes,  // [G] i32
                                  const Tensor& dout,         // [M, N] the output's dtype
                                  const RaggedDotVjpOptions& options = {});

}  // namespace tokamax
