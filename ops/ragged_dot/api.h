// ragged_dot: the high-level entry point, tokamax::ragged_dot(lhs, rhs, group_sizes, options).
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens)
//   K      contraction extent
//   N      output features
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/dtype.h"
#include "ops/framework/tensor.h"
#include "ops/ragged_dot/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const RaggedDotOp& ragged_dot_op();

struct RaggedDotOptions {
  // "auto" picks the first implementation supported on this machine for these args, falling back
  // on NotImplemented; a name ("cpu", "reference") runs exactly that one or throws.
  std::string implementation = "auto";
  std::optional<DType> preferred_element_type;  // default: f32 for 16-bit inputs
  std::optional<nlohmann::json> config;         // explicit config (needs a named implementation)
};

// out[M, N]: rows of group g of lhs times rhs[g]; rows past sum(group_sizes) are zero.
// Throws InvalidArgument naming the argument when shapes or sizes disagree.
Tensor ragged_dot(const Tensor& lhs,          // [M, K]
                  const Tensor& rhs,          // [G, K, N]
                  const Tensor& group_sizes,  // [G] i32
                  const RaggedDotOptions& options = {});

}  // namespace tokamax
