// kimi_delta_attention: the math spec (binding, validation, counts, inputs, reference, oracle)
// of upstream's Kimi Delta Attention (kda/base.py, reference.py): a gated delta-rule
// recurrence with a per-key-channel decay.
//
// Dimensions.
//   H      heads;  B  batch;  T  tokens (t a token)
//   K      query / key dimension;  V  value dimension
//   N      recurrent state slots per batch row (segments: slot seg - 1)
//
// Per head h, batch row b and token t, with the state S of its slot ([K, V], f32):
//   g   = gate[h, b, t] (use_gate_in_kernel: g_f = gate + delta_time_bias[h], A = exp(a_log[h]),
//         g = -A softplus(g_f), or lower_bound sigmoid(A g_f) with a lower_bound)
//   q, k = query, key (use_qk_l2norm: x / sqrt(|x|^2 + 1e-6)), q *= scale
//   S  <- diag(exp g) S;  r = v - k^T S;  S <- S + (beta k) r^T;  out[h, b, t] = q^T S
// With segment_ids [B, T] (1-based; 0 is padding), token t uses slot segment_ids[b, t] - 1, and
// a token whose id is 0 or past N outputs zeros and leaves every state as it was. The states
// start at initial_state [B, N, H, K, V] (zeros without it); output_final_state also returns
// them after the last token, f32.
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

struct KdaProblem {
  static constexpr std::string_view kOp = "kimi_delta_attention";
  static constexpr std::string_view kSummary =
      "upstream's Kimi Delta Attention: the gated delta rule with per-key-channel decay, "
      "[H, B, T, K] heads first, segments with their own state slots, initial and final state";
  int64_t H = 0, B = 0, T = 0, K = 0, V = 0, N = 1;
  DType dtype = DType::kF32;  // query, key, value, gate and out
  double scale = 1.0;
  bool use_qk_l2norm = false;
  bool use_gate_in_kernel = false;
  std::optional<double> lower_bound;  // with use_gate_in_kernel
  bool has_delta_time_bias = false;   // with use_gate_in_kernel
  bool has_segments = false;          // segment_ids i32 [B, T]
  bool has_initial_state = false;     // initial_state [B, N, H, K, V]
  bool output_final_state = false;

  static KdaProblem from(const BoundArgs& args);
};

using KdaOp = ProblemOp<KdaProblem>;

// The decay's log g of one token and key channel from its gate value (the activation under
// use_gate_in_kernel; the gate itself otherwise), in `Acc`.
template <typename Acc>
Acc kda_log_decay(const KdaProblem& p, Acc gate, Acc a_log, Acc delta_time_bias);

// The portable reference: the recurrence token by token in f32 (f64 for f64 inputs), as
// upstream's reference.py.
void kimi_delta_attention_reference(const KdaProblem& p, const TensorMap& inputs,
                                    // Outputs.
                                    TensorMap& outputs);

}  // namespace tokamax
