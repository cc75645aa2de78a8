// router_topk: the high-level C++ API.
//
// Dimensions.
//   T, E, k   as in base.h
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/tensor.h"
#include "ops/router_topk/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const RouterTopKOp& router_topk_op();

struct RouterTopKOptions {
  // "auto" picks the first implementation supported for these args; a name runs exactly that.
  std::string implementation = "auto";
  std::optional<nlohmann::json> config = std::nullopt;  // explicit config (a named implementation)
};

struct RouterTopKResult {
  Tensor weights;  // [T, k] f32, descending; NaN for a token without a real score
  Tensor indices;  // [T, k] i32 experts
};

// Each token's k largest router scores and their experts (base.h). Throws InvalidArgument naming
// the argument on bad shapes, dtypes or k.
RouterTopKResult router_topk(const Tensor& scores,  // [T, E] f32, bf16 or f16
                             int64_t k,             // 1 <= k <= E
                             const RouterTopKOptions& options = {});

}  // namespace tokamax
