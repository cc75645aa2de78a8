// dot_product_attention: upstream's Mask ranges and token indices (attention/base.py,
// Mask.as_array), the key mask the kernels, the reference and the oracle read.
//
// Dimensions: as base.h (*B, B, T, t, H; b, hq, r, j).
//
// With qi = q_indices[b, hq, r] (default r) and kj = k_indices[b, hq, j] (default j), key j is
// visible from row r of head (b, hq) iff
//   q_start[b, hq, j] <= qi < q_end[b, hq, j]     (each key's range of query indices)
//   k_start[b, hq, r] <= kj < k_end[b, hq, r]     (each row's range of key indices)
// (an absent bound is no bound), and, under is_causal / a CausalMask(offset, window), when
// indices are given, qi >= kj - offset (and qi < kj - offset + window) on the indices instead
// of the positions. Packed documents: k_start / k_end the row's document; prefix LM: k_end the
// prefix length for prompt rows.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "ops/dot_product_attention/base.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// The six tensors' names, in bind's order.
inline constexpr const char* kAttentionRangeNames[] = {"q_start", "q_end",     "k_start",
                                                       "k_end",   "q_indices", "k_indices"};

// Whether `name` is one of them.
bool is_attention_range_name(std::string_view name);

// Binds the six optional i32 tensors (top-level args, or inside a mask object), each
// broadcastable to its shape: q_start / q_end / k_indices [*B, H, t], k_start / k_end /
// q_indices [*B, H, T]. Writes the canonical specs into `out`; throws InvalidArgument naming
// the field.
void bind_attention_ranges(const nlohmann::json& args, const nlohmann::json* mask,
                           const std::vector<int64_t>& batch, int64_t H, int64_t T, int64_t t,
                           nlohmann::json& out);

// Seeded contents for the tensors p names: packed documents of 1 to 16 tokens for the ranges
// (k_start / k_end the row's document in key positions, q_start / q_end the key's in query
// positions) and non-decreasing indices from 0-2 with steps of 0, 1 or 2.
void make_attention_range_inputs(const AttentionProblem& p, uint64_t seed, TensorMap& inputs);

// p with its key mask built from the inputs when p has ranges (unchanged otherwise); every
// implementation, the reference and the oracle run on this.
AttentionProblem with_range_mask(const AttentionProblem& p, const TensorMap& inputs);

}  // namespace tokamax
