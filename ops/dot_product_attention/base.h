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

#include "ops/common/flash_attention/problem.h"
#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// The parsed, validated view of dot_product_attention's BoundArgs: the flash-attention core's
// problem (ops/common/flash_attention/problem.h holds the fields and key_range). Shared by the
// forward op and its VJP: nothing here is forward-specific.
struct AttentionProblem : FlashAttentionProblem {
  static constexpr std::string_view kOp = "dot_product_attention";
  static constexpr std::string_view kSummary =
      "softmax(scale * q k^T + bias, masked) v with GQA, causal/local masks, soft cap; a "
      "row with no visible key is zeros (upstream's XLA path: the mean of v)";

  // Upstream's Mask(q_start, q_end, k_start, k_end) ranges and q_indices / k_indices, i32
  // tensors (range_mask.h): absent unless given.
  std::optional<TensorSpec> q_start, q_end;  // broadcastable to [*B, H, t]
  std::optional<TensorSpec> k_start, k_end;  // broadcastable to [*B, H, T]
  std::optional<TensorSpec> q_indices;       // broadcastable to [*B, H, T]
  std::optional<TensorSpec> k_indices;       // broadcastable to [*B, H, t]
  bool has_ranges() const { return q_start || q_end || k_start || k_end || q_indices || k_indices; }

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
