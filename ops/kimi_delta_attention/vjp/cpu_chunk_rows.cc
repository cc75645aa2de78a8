// kimi_delta_attention_vjp on CPU: a chunk's shared rows (cpu_chunk_rows.h), compiled once per
// SIMD target by Highway so that their elementwise loops (n K per chunk) vectorize for it.
//
// Dimensions: as cpu_chunk_rows.h.
#include "ops/kimi_delta_attention/vjp/cpu_chunk_rows.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/delta_rule_chunk.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kimi_delta_attention/vjp/cpu_chunk_rows.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {

KdaVjpChunkRows ChunkRows(const KdaVjpChunk& c, bool backward, int64_t extra) {
  const int64_t n = c.n, K = c.K, sub = kKdaSubChunk, subs = (n + sub - 1) / sub;
  thread_local std::vector<float> scratch;
  const int64_t need = 5 * n * K + 3 * K + subs * (K + 2 * sub * K + 2 * n * K) + extra;
  if (static_cast<int64_t>(scratch.size()) < need) scratch.resize(static_cast<size_t>(need));
  KdaVjpChunkRows x;
  x.n = n;
  x.K = K;
  x.b = scratch.data();
  x.Kd = x.b + n * K;
  x.Kr = x.Kd + n * K;
  x.Qd = x.Kr + n * K;
  x.E = x.Qd + n * K;
  x.e_r = x.E + n * K;
  x.sd = x.e_r + subs * K;
  float* ones = x.sd + K;
  float* zeros = ones + K;
  x.L_all = zeros + K;
  x.R_all = x.L_all + subs * 2 * sub * K;
  x.F_all = x.R_all + subs * n * K;
  x.extra = x.F_all + subs * n * K;
  std::fill_n(ones, K, 1.0f);
  std::fill_n(zeros, K, 0.0f);
  const float* q = c.q;
  const float* k = c.k;
  float* b = x.b;
  for (int64_t t = 0; t < n; ++t) {
#pragma GCC ivdep
    for (int64_t i = 0; i < K; ++i) b[t * K + i] = c.g[t * K + i] + (t ? b[(t - 1) * K + i] : 0.0f);
  }
  // Per sub-chunk: E and L rows, then F and R rows.
  for (int64_t s0 = 0; s0 < n; s0 += sub) {
    const int64_t m = x.rows_of(s0);
    const float* br = b + s0 * K;
    float* L = x.L(s0);
    float* R = x.R(s0);
    float* F = x.F(s0);
    for (int64_t t = s0; t < s0 + m; ++t) {
      float* et = x.E + t * K;
      delta_rule_scale_exp(ones, br, b + t * K, 1.0f, false, et, K);
      float* lk = L + (t - s0) * K;
      float* lq = L + (m + t - s0) * K;
#pragma GCC ivdep
      for (int64_t i = 0; i < K; ++i) lk[i] = k[t * K + i] * et[i];
      if (backward) {
#pragma GCC ivdep
        for (int64_t i = 0; i < K; ++i) lq[i] = q[t * K + i] * et[i];
      }
    }
    for (int64_t s = 0; s < s0 + m; ++s) {
      if (s < s0) {
        delta_rule_scale_exp(ones, b + s * K, br, 1.0f, false, F + s * K, K);
      } else {  // 1 / exp(b_s - b_r): E's row, inverted (what the reciprocal form computes)
        const float* es = x.E + s * K;
#pragma GCC ivdep
        for (int64_t i = 0; i < K; ++i) F[s * K + i] = 1.0f / es[i];
      }
#pragma GCC ivdep
      for (int64_t i = 0; i < K; ++i) R[s * K + i] = k[s * K + i] * F[s * K + i];
    }
  }
  // The chunk-wide rows from those (KdaVjpChunkRows::e_r): one exponential per sub-chunk
  // instead of two per token.
  const float* e_last = x.E_last();
  const float* f_last = x.F_last();
  for (int64_t s0 = 0; s0 < n; s0 += sub) {
    const int64_t m = x.rows_of(s0);
    float* er = x.e_r + s0 / sub * K;  // e_r_of(s0), written here
    delta_rule_scale_exp(ones, zeros, b + s0 * K, 1.0f, false, er, K);
    for (int64_t t = s0; t < s0 + m; ++t) {
#pragma GCC ivdep
      for (int64_t i = 0; i < K; ++i) {
        const int64_t e = t * K + i;
        const float eb = er[i] * x.E[e];
        x.Kd[e] = k[e] * eb;
        x.Kr[e] = k[e] * (e_last[i] * f_last[e]);
        if (backward) x.Qd[e] = q[e] * eb;
      }
    }
  }
  // sd = exp(b_{n-1}) = e_b's last row.
  const float* er_last = x.e_r_of(n - 1);
#pragma GCC ivdep
  for (int64_t i = 0; i < K; ++i) x.sd[i] = er_last[i] * e_last[i];
  return x;
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(ChunkRows);

KdaVjpChunkRows kda_vjp_chunk_rows(const KdaVjpChunk& c, bool backward, int64_t extra) {
  return HWY_DYNAMIC_DISPATCH(ChunkRows)(c, backward, extra);
}

void kda_vjp_chunk_products(const KdaVjpChunkRows& x, bool q_rows, bool diagonal, float* X,
                            float* GR) {
  const int64_t n = x.n, K = x.K;
  std::fill_n(X, n * n, 0.0f);
  for (int64_t s0 = 0; s0 < n; s0 += kKdaSubChunk) {
    const int64_t m = x.rows_of(s0), cols = s0 + m;
    cpu_gemm_f32({DType::kF32, x.L(s0) + (q_rows ? m * K : 0), K}, {DType::kF32, x.R(s0), K, true},
                 m, cols, K, GR, cols, /*accumulate=*/false);
    for (int64_t t = s0; t < s0 + m; ++t) {
      std::copy_n(GR + (t - s0) * cols, diagonal ? t + 1 : t, X + t * n);
    }
  }
}

}  // namespace tokamax
#endif  // HWY_ONCE
