// top_k: the high-level C++ API.
//
// Dimensions.
//   b, n, k   as in base.h
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/tensor.h"
#include "ops/top_k/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const TopKOp& top_k_op();

struct TopKOptions {
  bool return_scores = false;  // also the selected scores' f32 bits (scores_bits)
  // "auto" picks the first implementation supported for these args; a name runs exactly that.
  std::string implementation = "auto";
  std::optional<nlohmann::json> config = std::nullopt;  // explicit config (a named implementation)
};

struct TopKResult {
  Tensor indices;                     // [b, k] i32, -1 past the eligible count
  std::optional<Tensor> scores_bits;  // [b, k] i32 f32 bits (-inf's past it), with return_scores
};

// The k largest eligible scores of each row (base.h). Throws InvalidArgument naming the argument
// on bad shapes, dtypes or k.
TopKResult top_k(const Tensor& scores,       // [b, n] f32, or i32 holding f32 bits
                 int64_t k,                  // 1 <= k <= n
                 const Tensor* row_lengths,  // [b] i32 or null (every row n long)
                 const TopKOptions& options = {});

}  // namespace tokamax
