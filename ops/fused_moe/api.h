// fused_moe: the high-level C++ API.
//
// Dimensions.
//   T, H, E, I, k   as in base.h
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/tensor.h"
#include "ops/fused_moe/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const FusedMoeOp& fused_moe_op();

struct FusedMoeOptions {
  int64_t topk = 2;
  bool renormalize = true;
  std::string act_fn = "silu";      // silu, swigluoai, silu_and_mul_with_clamp
  const Tensor* w1_bias = nullptr;  // [E, 1, 2 I]
  const Tensor* w2_bias = nullptr;  // [E, 1, H]
  // "auto" picks the first implementation supported for these args; a name runs exactly that.
  std::string implementation = "auto";
  std::optional<nlohmann::json> config = std::nullopt;  // explicit config (a named implementation)
};

// The MoE layer (base.h): [T, H] in x's dtype. Throws InvalidArgument naming the argument on bad
// shapes or dtypes, or a gating value the router cannot order (NaN, +inf, or a row without a
// finite logit).
Tensor fused_moe(const Tensor& x,       // [T, H] f32, bf16 or f16
                 const Tensor& w1,      // [E, H, 2 I] x's dtype: [gate | up]
                 const Tensor& w2,      // [E, I, H] x's dtype
                 const Tensor& gating,  // [T, E] f32, bf16 or f16: router logits
                 const FusedMoeOptions& options = {});

}  // namespace tokamax
