// The delta rule over a chunk of tokens at once (kimi_delta_attention, gated_delta_rule): the
// WY / UT form that turns a chunk's token-by-token updates into matrix products on the GEMM
// engine, with one state update per chunk.
//
// Dimensions.
//   n      tokens of the chunk (positions t, s in [0, n))
//   K      key (state row) dimension;  V  value (state column) dimension
//
// Per token the rule is S_t = D_t S_{t-1} + k_t u_t^T with D_t = diag(exp g_t) (a decay per
// state row) and u_t = beta_t (v_t - k_t^T D_t S_{t-1}), out_t = q_t^T S_t. With b_t the
// cumulative log decay from the chunk's start (b_t = g_0 + ... + g_t, per row) and S_0 the state
// before the chunk, S_t = exp(b_t) S_0 + sum_{s <= t} (k_s exp(b_t - b_s)) u_s^T, so
//   u_t + beta_t sum_{s < t} A'[t, s] u_s = beta_t v_t - beta_t (k_t exp(b_t))^T S_0,
// A'[t, s] = k_t . (k_s exp(b_t - b_s)) (elementwise over the rows): a unit lower triangular
// system (I + A) U = Y with A = diag(beta) A' and Y = [beta v] - [beta k exp(b)] S_0. Then
//   out = (q exp(b)) S_0 + P U,  P[t, s] = q_t . (k_s exp(b_t - b_s)) for s <= t;
//   S_n = exp(b_{n-1}) S_0 + (k exp(b_{n-1} - b))^T U.
// Every exponent is <= 0 (decays are <= 1), so nothing overflows. Both products with S_0 run as
// one (the stacked lhs [-beta k exp(b); q exp(b)]), and U is packed once for its two products.
// The callers compute the decayed products A and P (gated_delta_rule: one decay per head, k k^T
// and q k^T scaled elementwise; kimi_delta_attention: a decay per row, factored through
// sub-chunk boundaries).
#pragma once

#include <cstdint>

namespace tokamax {

struct DeltaRuleChunk {
  int64_t n = 0, K = 0, V = 0;
  // Inputs.
  const float* A = nullptr;   // [n, n] row stride n: beta_t A'[t, s], read for s < t only
  const float* P = nullptr;   // [n, n] row stride n: P[t, s] for s <= t, zeros above
  const float* kq = nullptr;  // [2n, K]: rows -beta_t k_t exp(b_t), then rows q_t exp(b_t)
  const float* kd = nullptr;  // [n, K] k_s exp(b_{n-1} - b_s)
  const float* sd = nullptr;  // [K] exp(b_{n-1}): the state rows' decay over the chunk
  // Inputs and outputs.
  float* uo = nullptr;  // [2n, V]: in, rows beta_t v_t then zeros; out, rows U then out_t
};

// Advances S [K, V] (row stride V) over the chunk and leaves its outputs in uo's last n rows.
// Single-threaded (the callers run one task per state).
void delta_rule_chunk(const DeltaRuleChunk& c,
                      // Outputs.
                      float* S);
// delta_rule_chunk's steps after the products with S_0, for a caller that formed [Y; out] in uo
// itself (gated_delta_rule: one decay per head scales whole rows, after the product with the
// unscaled [k; q]): the solve, out += P U and the state's update. c.kq is not read.
void delta_rule_chunk_update(const DeltaRuleChunk& c,
                             // Outputs.
                             float* S);

// (I + A) X = R in place on R [n, W] (row stride W), for A [n, n] strictly lower (row stride n;
// its diagonal and upper part are not read); and (I + A)^T X = R, the gradient's solve.
void delta_rule_solve_lower(const float* A, int64_t n,
                            // Inputs and outputs.
                            float* R, int64_t W);
void delta_rule_solve_lower_transposed(const float* A, int64_t n,
                                       // Inputs and outputs.
                                       float* R, int64_t W);

// y = a x (n elements, vectorized; in place when y = x): the chunk's operand rows.
void delta_rule_scale(const float* x, float a, float* y, int64_t n);
// y = a x + b y (n elements, vectorized).
void delta_rule_axpby(const float* x, float a, float b,
                      // Inputs and outputs.
                      float* y, int64_t n);

// y = a x exp(lo - hi), or a x / exp(hi - lo) with `reciprocal` (n elements, vectorized; the
// exponent lo - hi <= 0 per element, resp. hi - lo, and below -86 its exp is 0): a chunk's rows
// decayed per state row, kimi_delta_attention's factors through a reference token.
void delta_rule_scale_exp(const float* x, const float* hi, const float* lo, float a,
                          bool reciprocal,
                          // Outputs.
                          float* y, int64_t n);

// x = exp(x) for x <= 0 (n elements, vectorized; below -86 exactly 0): the chunk's decays.
void delta_rule_exp(float* x, int64_t n);

}  // namespace tokamax
