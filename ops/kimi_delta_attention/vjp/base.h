// kimi_delta_attention_vjp: the math spec of Kimi Delta Attention's gradient (binding, counts,
// inputs, reference and oracle): upstream's XlaChunkedKimiDeltaAttentionVjp (kda/xla_chunked.py),
// jax.vjp of the forward, with respect to query, key, value, gate, beta, a_log, delta_time_bias
// and initial_state.
//
// Dimensions: as ../base.h.
//
// Per (head, batch row), backward over the tokens, with the forward's per-token quantities
// (q^ = scale q / n_q and k^ = k / n_k under use_qk_l2norm, d = exp g, S' = diag(d) S_{t-1},
// r = v - S'^T k^, S_t = S' + beta k^ r^T, out_t = S_t^T q^) and an adjoint dS per state slot
// (dfinal_state at the end when given, else zeros):
//   dS += q^ dout_t^T;   dq^ = S_t dout_t
//   dr = beta dS^T k^;   dv = dr;   dbeta = k^T dS r;   dk^ = beta dS r - S' dr
//   dS' = dS - k^ dr^T;  dg_i = sum_c dS'_ic S'_ic;  dS <- diag(d) dS'
// then through the normalization (dk = (dk^ - k^ (k^ . dk^)) / n_k, q likewise times scale) and
// the gate's activation (dgate, and summed over tokens da_log and ddelta_time_bias); the slot's
// adjoint before its first token is dinitial_state. Padding tokens get zero gradients.
//
// Inputs: the forward's, the cotangent dout [H, B, T, V] in query's dtype, and with
// output_final_state optionally dfinal_state f32 [B, N, H, K, V] (zeros when absent). Outputs:
// dquery, dkey, dvalue, dgate, dbeta in their inputs' specs; da_log, ddelta_time_bias and
// dinitial_state when those inputs are given.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"
#include "ops/kimi_delta_attention/base.h"

namespace tokamax {

struct KdaVjpProblem {
  static constexpr std::string_view kOp = "kimi_delta_attention_vjp";
  static constexpr std::string_view kSummary =
      "kimi_delta_attention's VJP: gradients of query, key, value, gate, beta, a_log, "
      "delta_time_bias and initial_state for every gate form, segments and states";
  KdaProblem fwd;
  bool has_dfinal_state = false;  // dfinal_state f32 [B, N, H, K, V]
  static KdaVjpProblem from(const BoundArgs& args);
};

class KdaVjpOp : public ProblemOp<KdaVjpProblem> {
 public:
  const Op* primal() const override;
  std::vector<std::string> cotangents() const override { return {"dout"}; }
};

// The portable reference: the backward above in f32 per (head, batch row), the forward's states
// recomputed per block of tokens from checkpoints.
void kimi_delta_attention_vjp_reference(const KdaVjpProblem& p, const TensorMap& inputs,
                                        // Outputs.
                                        TensorMap& outputs);

}  // namespace tokamax
