// splash_attention_vjp: the math spec of splash attention's gradient (binding, counts, inputs,
// reference and oracle): upstream's SplashAttentionVjp (splash_attention/base.py), whose
// semantics are reference.py's attention_reference_vjp.
//
// Dimensions.
//   Hq, Hkv, g, T, t, D, d   as ../base.h; hq a q head, h = hq / g its kv head (0 with
//                            is_mqa), r a row, j a key, x a column of D, c of d
//
// Per q head hq and row r, with the mask M (and the segment ids), lse_r the forward's logsumexp
// (the input, or computed as the forward does), z_j = q_r . k_j and s_j = cap(z_j):
//   P_j   = exp(s_j - lse_r) where M[r, j], else w_r = exp(DEFAULT_MASK_VALUE - lse_r)
//   dP_j  = dout_r . v_j;   Di = sum_j P_j dP_j
//   dS_j  = P_j (dP_j - Di), times 1 - tanh^2(z_j / c) under attn_logits_soft_cap = c
//   dq_r  = sum_j dS_j k_j;   dk[h]_j += dS_j q_r;   dv[h]_j += P_j dout_r
//   dsinks[hq] = -sum_r exp(sinks[hq] - lse_r) (out_r . dout_r)
// (dk and dv summed over the g q heads of a kv head). Upstream's backward masks with its
// DEFAULT_MASK_VALUE (-0.7 * f32 max) whatever mask_value the forward used: on a row that sees a
// key, w_r is 0; on a row that sees none, lse_r is the forward's mask_value + log t rounded to
// f32, which is DEFAULT_MASK_VALUE itself when the forward used the default, so w_r = 1 and every
// key takes the row's whole cotangent (dv_j += dout_r for each j). Another mask_value, or a sink,
// makes w_r = 0. Every implementation follows this, w_r computed from the f32 lse as upstream.
//
// Inputs: the forward's (q, k, v, segment ids, sinks), the cotangent dout [Hq, T, d] in q's
// dtype, and optionally upstream's residual logsumexp f32 [Hq, T] and the forward's out
// [Hq, T, d]. Outputs: dq, dk, dv in their inputs' specs, and dsinks [Hq] with sinks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"
#include "ops/splash_attention/base.h"

namespace tokamax {

struct SplashAttentionVjpProblem {
  static constexpr std::string_view kOp = "splash_attention_vjp";
  static constexpr std::string_view kSummary =
      "splash_attention's VJP: dq, dk, dv and dsinks for every mask form, segment ids, sinks "
      "and soft cap; optional residual logsumexp [Hq, T] and forward output out";
  SplashAttentionProblem fwd;
  bool has_lse = false;  // logsumexp f32 [Hq, T]
  bool has_out = false;  // out [Hq, T, d]
  static SplashAttentionVjpProblem from(const BoundArgs& args);
};

class SplashAttentionVjpOp : public ProblemOp<SplashAttentionVjpProblem> {
 public:
  const Op* primal() const override;
  std::vector<std::string> cotangents() const override { return {"dout"}; }
};

// w_r of a row from its f32 lse: exp(f32(DEFAULT_MASK_VALUE) - lse), as upstream computes it.
double splash_masked_weight(float lse);

// The portable reference: upstream's formula per q head and row in f32 over every key.
void splash_attention_vjp_reference(const SplashAttentionVjpProblem& p, const TensorMap& inputs,
                                    // Outputs.
                                    TensorMap& outputs);

}  // namespace tokamax
