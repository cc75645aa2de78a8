// dot_product_attention_vjp: the math spec of attention's gradient (binding, counts, inputs,
// reference and oracle).
//
// Dimensions.
//   *B     batch dimensions (B = prod(*B) flattened)
//   T, t   query and key/value positions;  r a query row, j a key
//   H, h   query and key/value heads, g = H / h; q head hq reads kv head hq / g
//   D, d   q/k and v head dimensions
//
// Per batch b and q head hq (kv head i = hq / g), with s the capped, masked logits of the
// forward (base.h), P = softmax_j(s) (rows without a visible key: P = 0), out = P v, and the
// cotangent dout [*B, T, H, d]:
//   dv[i]  += P^T dout                     (summed over the g q heads of kv head i)
//   dP      = dout v^T
//   dS      = P * (dP - rowsum(dout * out))   (the softmax's backward; rowsum(dP * P) the same)
//   dS     *= 1 - tanh^2(z / c)   with z the uncapped logit, under logits_soft_cap = c
//   dbias  += dS                           (summed over every dimension the bias broadcasts)
//   dq      = logits_scale * dS k
//   dk[i]  += logits_scale * dS^T q        (summed over the g q heads)
// Masked entries have P = 0, so they contribute nothing. The gradients take their inputs'
// specs: dq q's, dk k's, dv v's, dbias bias's (only when a bias is given).
//
// Optional inputs, as upstream's VJP takes them: lse [*B, H, T] f32, the per-row log-sum-exp of
// s, log sum_j exp(s_j) (-inf on rows without a visible key), the forward's residual; and out
// [*B, T, H, d], the forward's output. Implementations that use them take P as exp(s - lse) and
// rowsum(dout * out) from out; without them they compute lse from the logits and the row sums
// as rowsum(P dP) (the cpu kernel) or from a recomputed out.
#pragma once

#include <string_view>

#include "ops/dot_product_attention/base.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// The parsed view of dot_product_attention_vjp's BoundArgs: the forward problem (dout has the
// forward output's spec) and whether the residual lse and the forward's out are inputs.
struct AttentionVjpProblem {
  static constexpr std::string_view kOp = "dot_product_attention_vjp";
  static constexpr std::string_view kSummary =
      "dot_product_attention's VJP: dq, dk, dv (and dbias) for every forward option; "
      "optional residual lse [*B, H, T] and forward output out";
  AttentionProblem fwd;
  bool has_lse = false;
  bool has_out = false;
  static AttentionVjpProblem from(const BoundArgs& args);
};

// The spec of the residual lse for these forward args: f32[*B, H, T].
TensorSpec attention_lse_spec(const AttentionProblem& problem);

class DotProductAttentionVjpOp : public ProblemOp<AttentionVjpProblem> {
 public:
  const Op* primal() const override;
  std::vector<std::string> cotangents() const override { return {"dout"}; }
  std::vector<ArgAlias> arg_aliases() const override { return attention_arg_aliases(); }
};

// The portable reference: per row the logits, P, dP and dS accumulated in `Acc` (Acc = double:
// the float64 oracle of every gradient). `bias`, `mask` and `dbias` are null when absent; the
// lse and out inputs are not read (P and out come from the recomputed logits).
template <typename Acc>
void dot_product_attention_vjp_reference(const AttentionProblem& problem,
                                         // Inputs.
                                         const Tensor& q,     // [*B, T, H, D]
                                         const Tensor& k,     // [*B, t, h, D]
                                         const Tensor& v,     // [*B, t, h, d]
                                         const Tensor* bias,  // broadcast to [*B, H, T, t]
                                         const Tensor* mask,  // bool, broadcast likewise
                                         const Tensor& dout,  // [*B, T, H, d] q's dtype
                                         // Outputs.
                                         Tensor& dq,      // q's spec
                                         Tensor& dk,      // k's spec
                                         Tensor& dv,      // v's spec
                                         Tensor* dbias);  // bias's spec

}  // namespace tokamax
