// gated_delta_rule: the math spec (binding, validation, counts, inputs, reference, oracle) of
// upstream's CausalConv1dGatedDeltaRule (0.0.17, causal_conv1d_gated_delta_rule/reference.py):
// vLLM's ragged Gated DeltaNet layer of Qwen3-Next / Qwen 3.5, decode and prefill in one call.
//
// Dimensions.
//   T      tokens of the whole ragged batch;  C = 2 n_kq d_k + n_v d_v  the conv channels
//   n_kq   query / key heads;  n_v  value heads (a multiple of n_kq)
//   d_k    query / key head dimension;  d_v  value head dimension
//   W      the conv's kernel_size;  NB  state slots;  R  requests (sequences)
//
// Request r < A = distribution[2] owns tokens [qsl[r], qsl[r + 1]) of qkv (qsl =
// query_start_loc) and the state slot state_indices[r]; tokens from qsl[A] on are padding. Its
// states start from the slot when it has an initial state, seq_lens[r] > its token count, and
// from zeros otherwise (the recurrent state of every request r < R, active or not, is zeroed so
// in the output; the conv state only in batches that are not decode-only, distribution[0] !=
// distribution[2], upstream's two branches). Per token of request r:
//   x    = the causal depthwise conv of qkv over the request's tokens after its conv state
//          (W - 1 rows), weight [C, 1, W], + conv_bias; rounded to qkv's dtype (the first W - 1
//          tokens: the sum rounded, then the bias added and rounded again, as upstream)
//   y    = silu(x) = x logistic(x), each step rounded likewise (XLA's order); q, k, v = y's
//          [n_kq d_k], [n_kq d_k], [n_v d_v] parts, value head h reading query / key head
//          h / (n_v / n_kq)
//   q, k = x / sqrt(|x|^2 + 1e-6) per head, q *= d_k^-1/2;  beta = sigmoid(b);
//   g    = -exp(a_log) softplus(a + dt_bias)  (per value head)
//   S   <- exp(g) S;  S <- S + beta k (v - k^T S)^T;  out = q^T S  (S [d_k, d_v] f32 per head)
// The new conv state of an active request holds its last W - 1 inputs (old state rows first when
// it has fewer tokens); the recurrent state its S after its last token, in the state's dtype.
// Padding tokens output zeros.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// Offsets of token t's rows in a head-major buffer: q heads [n_kq][T][d_k], then k heads
// [n_kq][T][d_k], then v heads [n_v][T][d_v].
struct GdnHeadMajor {
  int64_t T = 0, n_kq = 0, d_k = 0, d_v = 0;
  int64_t q(int64_t t, int64_t hk) const { return (hk * T + t) * d_k; }
  int64_t k(int64_t t, int64_t hk) const { return ((n_kq + hk) * T + t) * d_k; }
  int64_t v(int64_t t, int64_t h) const { return 2 * n_kq * T * d_k + (h * T + t) * d_v; }
};

struct GdnProblem {
  static constexpr std::string_view kOp = "gated_delta_rule";
  static constexpr std::string_view kSummary =
      "upstream's causal conv1d + gated delta rule (Qwen3-Next / Qwen 3.5 Gated DeltaNet): ragged "
      "decode and prefill with conv and recurrent state slots";
  int64_t T = 0, C = 0, n_kq = 0, n_v = 0, d_k = 0, d_v = 0, W = 0, NB = 0, R = 0;
  DType dtype = DType::kF32;        // qkv, conv_state, out
  DType state_dtype = DType::kF32;  // recurrent_state
  bool has_conv_bias = false;
  std::vector<int64_t> query_start_loc, state_indices, distribution, seq_lens;

  int64_t active() const { return distribution[2]; }  // A
  bool decode_only() const { return distribution[0] == distribution[2]; }
  int64_t tokens(int64_t r) const { return query_start_loc[r + 1] - query_start_loc[r]; }
  // upstream's has_initial_state: seq_lens[r] minus the request's tokens (query_start_loc as
  // given, also past A) is positive.
  bool has_initial_state(int64_t r) const { return seq_lens[r] - tokens(r) > 0; }
  // Whether request r's conv state starts from its slot (else zeros).
  bool conv_from_slot(int64_t r) const { return decode_only() || has_initial_state(r); }
  // Whether active request r is one token continuing its slot's state (a decode).
  bool decodes(int64_t r) const { return r < active() && tokens(r) == 1 && has_initial_state(r); }
  int64_t repeat() const { return n_v / n_kq; }
  GdnHeadMajor head_major() const { return {T, n_kq, d_k, d_v}; }
  static GdnProblem from(const BoundArgs& args);
};

using GdnOp = ProblemOp<GdnProblem>;

// The f32 gate and beta of value head h of a token: g = -exp(a_log) softplus(a + dt_bias),
// beta = sigmoid(b), in `Acc`.
template <typename Acc>
Acc gdn_log_decay(Acc a, Acc a_log, Acc dt_bias);
template <typename Acc>
Acc gdn_beta(Acc b);

// y = silu(conv) of one token's channels [0, n) as upstream rounds it in `dtype` (f32, bf16,
// f16): (conv_bias, unless `boundary`) + sum_k w[k, c] in[k, c] over its W input rows (row
// stride C), rounded; at a boundary (the first W - 1 tokens of a request, every token of a
// decode-only batch) the bias added then and rounded again; then x logistic(x) with exp, 1 + e,
// the reciprocal and the product each rounded (XLA's order). Vectorized.
void gdn_conv_row(DType dtype,
                  // Inputs.
                  const float* w,  // [W, C] the taps, tap-major
                  int64_t W,
                  const float* in,    // [W, C]
                  const float* bias,  // [n] or null
                  bool boundary,
                  // Outputs.
                  float* y,  // [n]
                  int64_t n, int64_t C);

// Where the conv's output goes: token-major [T, C] (the reference), or head-major, each head's
// rows contiguous over the tokens (the cpu kernel: a (request, value head) task streams its q,
// k and v rows instead of reading 512 bytes from every 16 KiB row).
enum class GdnConvLayout { kTokenMajor, kHeadMajor };

// The conv + silu of every valid token in qkv's dtype's values, as upstream rounds them (f32, T C
// floats in `layout`; token-major: padding tokens 0, head-major: their rows unwritten), and the
// updated conv state ([NB, W - 1, C] in conv_state's dtype: a copy of the input's with each
// active request's rows). Parallel (`threads` as parallel_for) over blocks of each request's
// tokens.
void gdn_conv_silu(const GdnProblem& p, const TensorMap& inputs, int threads, GdnConvLayout layout,
                   // Outputs.
                   float* mixed,         // T C
                   Tensor& conv_state);  // [NB, W - 1, C]

// The portable reference: the conv, then the recurrence token by token in f32 with the state
// rounded to its dtype after each token, as upstream's reference.py.
void gated_delta_rule_reference(const GdnProblem& p, const TensorMap& inputs,
                                // Outputs.
                                TensorMap& outputs);

}  // namespace tokamax
