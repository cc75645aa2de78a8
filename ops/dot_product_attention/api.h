// dot_product_attention: the high-level entry point, tokamax::dot_product_attention(q, k, v, ...).
//
// Dimensions.
//   *B     batch dimensions
//   T, t   query and key/value positions
//   H, h   query and key/value heads (H a multiple of h: grouped-query attention)
//   D, d   q/k and v head dimensions
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ops/dot_product_attention/base.h"
#include "ops/framework/tensor.h"

namespace tokamax {

class ApiCall;  // ops/framework/dispatch.h

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const DotProductAttentionOp& dot_product_attention_op();

struct DotProductAttentionOptions {
  std::optional<double> logits_scale;     // default 1 / sqrt(D)
  bool is_causal = false;                 // key j visible from row r iff j <= r (top-left)
  std::optional<double> logits_soft_cap;  // c: logits -> c * tanh(logits / c)
  std::optional<Tensor> bias;             // float, broadcastable to [*B, H, T, t]
  std::optional<Tensor> mask;             // bool, broadcastable to [*B, H, T, t]; true = keep
  std::optional<std::vector<int64_t>> q_seq_lengths;        // [B]: rows past them give zeros
  std::optional<std::vector<int64_t>> kv_seq_lengths;       // [B]: keys past them are masked
  std::optional<std::pair<int64_t, int64_t>> local_window;  // (left, right), both >= 0
  // Upstream's Mask ranges and token indices by name (q_start, q_end, k_start, k_end,
  // q_indices, k_indices), i32 tensors (range_mask.h).
  TensorMap ranges;
  // "auto" picks the first implementation supported for these args; a name runs exactly that.
  std::string implementation = "auto";
  std::optional<nlohmann::json> config;  // explicit config (needs a named implementation)
};

// out[*B, T, H, d] in q's dtype. Throws InvalidArgument naming the argument on bad shapes.
Tensor dot_product_attention(const Tensor& q,  // [*B, T, H, D]
                             const Tensor& k,  // [*B, t, h, D]
                             const Tensor& v,  // [*B, t, h, d]
                             const DotProductAttentionOptions& options = {});

// Adds q, k, v and the options to a call of this op or of its VJP (the arguments they share).
void add_attention_arguments(ApiCall& call, const Tensor& q, const Tensor& k, const Tensor& v,
                             const DotProductAttentionOptions& options);

}  // namespace tokamax
