// ragged_gather_reduce: the high-level C++ API.
//
// Dimensions.
//   R, h, I, g, T   as in base.h
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/tensor.h"
#include "ops/ragged_gather_reduce/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const RaggedGatherReduceOp& ragged_gather_reduce_op();

struct RaggedGatherReduceOptions {
  // "auto" picks the first implementation supported for these args; a name runs exactly that.
  std::string implementation = "auto";
  std::optional<nlohmann::json> config = std::nullopt;  // explicit config (a named implementation)
};

// The MoE combine (base.h): [T, h] in x's dtype. Throws InvalidArgument naming the argument on
// bad shapes or dtypes, a reduce_group_size that does not divide I, or a valid route's index
// outside [0, R).
Tensor ragged_gather_reduce(const Tensor& x,                // [R, h] f32, bf16 or f16
                            const Tensor& indices,          // [I] i32
                            const Tensor& topk_weights,     // [I] f32, bf16 or f16
                            const Tensor& valid_rows_mask,  // [I] bool
                            int64_t reduce_group_size,      // g >= 1, dividing I
                            const RaggedGatherReduceOptions& options = {});

}  // namespace tokamax
