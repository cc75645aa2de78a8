// ragged_paged_attention: the high-level C++ API.
//
// Dimensions: as base.h.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ops/framework/tensor.h"
#include "ops/ragged_paged_attention/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const RaggedPagedAttentionOp& ragged_paged_attention_op();

// Upstream's keyword arguments by its names (sm_scale, sliding_window, soft_cap, q_scale,
// k_scale, v_scale, use_causal_mask, skip_kv_update, return_lse, out_dtype) and the metadata
// (kv_lens, page_indices, cu_q_lens, distribution) as int lists; `implementation` "auto" or a
// name, `config` an explicit config for a named one.
struct RaggedPagedAttentionOptions {
  nlohmann::json args = nlohmann::json::object();
  std::string implementation = "auto";
  std::optional<nlohmann::json> config = std::nullopt;
};

// "out" [Tq, Hq, D], "updated_kv_cache" (unless skip_kv_update) and "lse" (with return_lse).
// Throws InvalidArgument naming the argument on bad shapes, dtypes or metadata.
TensorMap ragged_paged_attention(const Tensor& queries,   // [Tq, Hq, D]
                                 const Tensor& keys,      // [Tq, Hkv, D] the cache's dtype
                                 const Tensor& values,    // [Tq, Hkv, D]
                                 const Tensor& kv_cache,  // [pages, page_size, 2 Hkv, Dp]
                                 const RaggedPagedAttentionOptions& options);

}  // namespace tokamax
