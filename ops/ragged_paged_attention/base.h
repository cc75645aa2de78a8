// ragged_paged_attention: the math spec (binding, validation, counts, inputs, reference and
// oracle) of upstream Tokamax's batched ragged paged attention (0.0.17, batched_rpa/reference.py).
//
// Dimensions.
//   Tq     query tokens of the whole ragged batch (every sequence's, concatenated)
//   Hq     query heads;  Hkv  kv heads (Hq a multiple of Hkv; g = Hq / Hkv)
//   D      head dimension;  Dp  the cache's padded head dimension (>= D; upstream pads to 128)
//   S      sequences (max_num_seqs);  P  pages per sequence (page_indices has S P entries)
//   pages, page_size   the cache: kv_cache [pages, page_size, 2 Hkv, Dp], K of kv head h at
//                      2h and V at 2h + 1 (upstream's interleaving)
//
// Token t belongs to sequence s = the last with cu_q_lens[s] <= t; it is valid iff t <
// cu_q_lens[A] and s < A, A = distribution[2] (the active sequences). A valid token sits at
// position pos = kv_lens[s] - q_len(s) + (t - cu_q_lens[s]) of its sequence: unless
// skip_kv_update, its keys and values are written there (page page_indices[s P + pos /
// page_size], row pos % page_size; the padding lanes D..Dp zeroed), and then it attends to its
// sequence's keys j < kv_lens[s] (j <= pos with use_causal_mask; j > pos - sliding_window with a
// window) in the updated cache: logits sm_scale (q / q_scale) . (k / k_scale), soft_cap c
// tanh(x / c), softmax, times v / v_scale, in f32, rounded to out_dtype (default q's). Invalid
// tokens give zeros (lse -inf).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

struct RaggedPagedAttentionProblem {
  static constexpr std::string_view kOp = "ragged_paged_attention";
  static constexpr std::string_view kSummary =
      "mixed prefill and decode attention over a paged KV cache (upstream's batched ragged paged "
      "attention): new K/V written into the cache, GQA, causal / sliding window, soft cap";
  int64_t Tq = 0, Hq = 0, Hkv = 0, D = 0, Dp = 0, S = 0, P = 0, pages = 0, page_size = 0;
  DType q_dtype = DType::kF32, kv_dtype = DType::kF32, out_dtype = DType::kF32;
  std::vector<int64_t> kv_lens, page_indices, cu_q_lens, distribution;
  double sm_scale = 1.0;
  int64_t sliding_window = 0;  // 0: none
  double soft_cap = 0.0;       // 0: none
  double q_scale = 1.0, k_scale = 1.0, v_scale = 1.0;
  bool causal = true, skip_kv_update = false, return_lse = false;

  int64_t groups() const { return Hq / Hkv; }
  int64_t active() const { return distribution[2]; }
  static RaggedPagedAttentionProblem from(const BoundArgs& args);
};

using RaggedPagedAttentionOp = ProblemOp<RaggedPagedAttentionProblem>;

// Each token's sequence and position (valid tokens only; seq -1 otherwise), and each sequence's
// visible key range for a token at `pos`: [lo, hi).
struct RpaTokens {
  std::vector<int64_t> seq, pos;
  explicit RpaTokens(const RaggedPagedAttentionProblem& p);
  static std::pair<int64_t, int64_t> key_range(const RaggedPagedAttentionProblem& p, int64_t s,
                                               int64_t pos);
};

// Where the cache keeps key (v = 0) or value (v = 1) j of kv head h of sequence s: the flat
// element index of its first lane.
inline int64_t rpa_cache_at(const RaggedPagedAttentionProblem& p, int64_t s, int64_t j, int64_t h,
                            int v) {
  const int64_t page = p.page_indices[s * p.P + j / p.page_size];
  return ((page * p.page_size + j % p.page_size) * 2 * p.Hkv + 2 * h + v) * p.Dp;
}

// The cache after the update (a copy of kv_cache with each valid token's K and V written, the
// padding lanes zeroed); the cache itself with skip_kv_update.
void rpa_update_cache(const RaggedPagedAttentionProblem& p, const RpaTokens& tokens,
                      const TensorMap& inputs,
                      // Outputs.
                      Tensor& cache);  // kv_cache's spec

// The portable reference: the update, then per valid token and head f32 loops over its keys.
void ragged_paged_attention_reference(const RaggedPagedAttentionProblem& p, const TensorMap& inputs,
                                      // Outputs.
                                      TensorMap& outputs);

}  // namespace tokamax
