// splash_attention: the high-level C++ API.
//
// Dimensions: as base.h.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/tensor.h"
#include "ops/splash_attention/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const SplashAttentionOp& splash_attention_op();

// Upstream's keyword arguments by its names (mask as mask.h's objects, is_mqa, mask_value,
// attn_logits_soft_cap, return_residuals); optional tensors (q_segment_ids, kv_segment_ids,
// sinks) go in `tensors`. `implementation` "auto" or a name, `config` an explicit config for a
// named one.
struct SplashAttentionOptions {
  nlohmann::json args = nlohmann::json::object();
  TensorMap tensors;
  std::string implementation = "auto";
  std::optional<nlohmann::json> config = std::nullopt;
};

// "out" [Hq, T, d] in q's dtype, and with return_residuals "max_logits" and "logsumexp" f32
// [Hq, T]. Throws InvalidArgument naming the argument on bad shapes, dtypes or masks.
TensorMap splash_attention(const Tensor& q,  // [Hq, T, D]
                           const Tensor& k,  // [Hkv, t, D] ([t, D] with is_mqa)
                           const Tensor& v,  // [Hkv, t, d]
                           const SplashAttentionOptions& options);

}  // namespace tokamax
