// dot_product_attention: the math spec (binding, validation, counts, inputs, reference, oracle).
//
// Dimensions.
//   *B     batch dimensions (any number, flattened to B = prod(*B) by the kernels)
//   T      query positions (rows);  t  key/value positions (columns)
//   H      query heads;  h  key/value heads; H = g * h (grouped-query attention: q heads
//          [g*i, g*i+g) share kv head i)
//   D      q/k head dimension (contraction of the logits);  d  v head dimension (output)
//
// out[b, r, hq, :] = sum_j softmax_j(logit(b, hq, r, j)) v[b, j, hq / g, :] where
//   logit = cap(logits_scale * q[b,r,hq,:] . k[b,j,hq/g,:] + bias[b,hq,r,j]),
//   cap(x) = c * tanh(x / c) when logits_soft_cap = c is set,
// over the keys j visible from row r (see AttentionProblem::key_range and the bool mask). A row
// with no visible key is all zeros.
//
// With return_residuals: true (upstream's residuals for the VJP) the op also outputs lse
// [*B, H, T] f32, the per-row log-sum-exp of the logits, log sum_j exp(logit_j) (-inf on rows
// with no visible key): the input dot_product_attention_vjp takes to recompute P block by block.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// Where the element (b, hq, r, j) of a tensor broadcast to [*B, H, T, t] lives: numpy
// broadcasting, right-aligned; size-1 (or missing) dimensions have stride 0.
struct AttentionBroadcast {
  std::vector<int64_t> batch_offset;  // [B] offset of flattened batch b
  int64_t stride_h = 0, stride_T = 0, stride_t = 0;
  int64_t offset(int64_t b, int64_t hq, int64_t r, int64_t j) const {
    return batch_offset[b] + hq * stride_h + r * stride_T + j * stride_t;
  }
};

// The parsed, validated view of dot_product_attention's BoundArgs. Shared by the forward op and
// (later) its VJP: nothing here is forward-specific.
struct AttentionProblem {
  static constexpr std::string_view kOp = "dot_product_attention";
  static constexpr std::string_view kSummary =
      "softmax(scale * q k^T + bias, masked) v with GQA, causal/local masks, soft cap; a "
      "row with no visible key is zeros (upstream's XLA path: the mean of v)";
  std::vector<int64_t> batch;  // *B
  int64_t B = 1, T = 0, t = 0, H = 0, h = 0, D = 0, d = 0;
  DType dtype = DType::kF32;  // q, k, v and the output
  double logits_scale = 1.0;
  bool is_causal = false;
  double logits_soft_cap = 0.0;                 // 0: no cap
  std::optional<TensorSpec> bias;               // broadcastable to [*B, H, T, t], any float dtype
  std::optional<TensorSpec> mask;               // bool, broadcastable to [*B, H, T, t], true = keep
  std::vector<int64_t> q_seq_lengths;           // [B] or empty (no limit)
  std::vector<int64_t> kv_seq_lengths;          // [B] or empty (no limit)
  int64_t window_left = -1, window_right = -1;  // local_window; -1: unbounded
  // Under is_causal, upstream's CausalMask(offset, window_size): key j is visible from row r
  // iff j <= r + causal_offset and, with a window, j > r + causal_offset - causal_window
  // (is_causal alone: offset 0, no window).
  int64_t causal_offset = 0;
  int64_t causal_window = -1;     // -1: none
  bool return_residuals = false;  // also output lse [*B, H, T] f32
  // false: out = sum_j exp(logit_j - max) v_j, the softmax's numerator without the division
  // (upstream's normalize_output; max the row's largest visible logit).
  bool normalize_output = true;
  // Upstream's dropout: the softmax weights times dropout_mask / (1 - dropout_rate), after
  // normalization (the denominator sums the weights before it; lse is unchanged).
  std::optional<TensorSpec> dropout_mask;  // bool, broadcastable to [*B, H, T, t]
  double dropout_rate = 0.0;

  int64_t groups() const { return H / h; }  // g
  bool has_local_window() const { return window_left >= 0; }
  // A causal mask other than the plain diagonal (an offset or a window).
  bool has_causal_band() const { return is_causal && (causal_offset != 0 || causal_window >= 0); }
  // The keys [lo, hi) row r of batch b may see under causal, local window and sequence
  // lengths (an interval: each part is one, and they AND together). Causal aligns top-left:
  // key j is visible from row r iff j <= r + causal_offset, also when T != t (upstream
  // Tokamax's convention).
  // Empty (lo >= hi) for rows past q_seq_lengths[b]. The bool mask comes on top of this.
  std::pair<int64_t, int64_t> key_range(int64_t b, int64_t r) const;
  AttentionBroadcast bias_layout() const;
  AttentionBroadcast mask_layout() const;
  AttentionBroadcast dropout_layout() const;
  // The factor a kept weight is multiplied by, 1 / (1 - dropout_rate).
  double dropout_scale() const { return 1.0 / (1.0 - dropout_rate); }

  static AttentionProblem from(const BoundArgs& args);
};

// Residuals of the forward pass for a VJP: the row maximum of the (capped, masked) logits and
// the softmax denominator sum_j exp(logit_j - max), [B, H, T] f32 each (-inf and 0 on rows
// without visible keys).
struct AttentionResiduals {
  std::vector<float> row_max;
  std::vector<float> row_sum;
};

// Upstream's public-API spellings this op also accepts: scale, query_seq_lengths,
// key_value_seq_lengths, local_window_size (an int w: the window (w, w)).
const std::vector<ArgAlias>& attention_arg_aliases();

class DotProductAttentionOp : public ProblemOp<AttentionProblem> {
 public:
  std::vector<ArgAlias> arg_aliases() const override { return attention_arg_aliases(); }
};

// The portable reference, accumulating (logits, softmax, P V) in `Acc`; Acc = double computes
// the float64 oracle of the whole output. `bias` and `mask` are null when absent. Fills
// `residuals` when given.
template <typename Acc>
void dot_product_attention_reference(const AttentionProblem& problem,
                                     // Inputs.
                                     const Tensor& q,     // [*B, T, H, D]
                                     const Tensor& k,     // [*B, t, h, D]
                                     const Tensor& v,     // [*B, t, h, d]
                                     const Tensor* bias,  // broadcast to [*B, H, T, t]
                                     const Tensor* mask,  // bool, broadcast to [*B, H, T, t]
                                     // Outputs.
                                     Tensor& out,  // [*B, T, H, d] in q's dtype
                                     AttentionResiduals* residuals = nullptr,
                                     // Inputs.
                                     const Tensor* dropout_mask = nullptr);  // bool, as mask

}  // namespace tokamax
