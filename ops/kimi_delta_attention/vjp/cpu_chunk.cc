// kimi_delta_attention_vjp on CPU: one chunk's forward step and backward in the WY form
// (cpu_kernel.h: kda_chunk_advance, kda_vjp_chunk), their products on the GEMM engine.
//
// Dimensions: as ../base.h; n the chunk's tokens (t, s), m a sub-chunk's, `cols` the columns a
// sub-chunk's rows see (every token up to its last).
//
// The forward of a chunk from its state S_0 (ops/common/delta_rule_chunk.h), with b the
// cumulative log decays, Kd = k exp(b), Qd = q exp(b), Kr = k exp(b_{n-1} - b), sd =
// exp(b_{n-1}), A = diag(beta) A' and P the decayed products:
//   R0 = v - Kd S_0;  Y = diag(beta) R0;  (I + A) U = Y;
//   out = Qd S_0 + P U;  S_n = diag(sd) S_0 + Kr^T U.
// The checkpointing forward keeps U and A' for the backward (a product of n K V multiply-adds
// and a solve saved for n (V + n) stored floats). Backward from dout, dS_n:
//   dU = P^T dout + Kr dS_n;  dP = dout U^T (s <= t);  dQd = dout S_0^T;  dKr = U dS_n^T;
//   (I + A)^T dY = dU;  dA = -dY U^T (s < t);  dR0 = diag(beta) dY = dv;
//   dbeta_t = dY_t . R0_t + sum_s dA[t, s] A'[t, s];  dKd = -dR0 S_0^T;
//   dS_0 = diag(sd) dS_n + Qd^T dout - Kd^T dR0;
// where dY_t . R0_t = dY_t . v_t - Kd_t . X_t with X = dY S_0^T (the product dKd needs), so R0
// itself is not needed;
// then the decays: each pairwise product A'[t, s] = k_t . (k_s exp(b_t - b_s)) (P with q_t)
// factors through its sub-chunk's first token r as the forward's (../cpu_chunk.cc), so its
// gradients are two GEMMs per sub-chunk: rows t take exp(b_t - b_r) (M R), columns s take
// exp(b_r - b_s) (M^T L), and b gets +x_t . (row sums) and -x_s . (column sums). Kd, Qd, Kr and
// sd add their elementwise terms, and dg is the reverse cumulative sum of db.
//
// Compiled once per SIMD target by Highway: its elementwise loops (n K and n n per chunk)
// vectorize for the target; the products call the GEMM engine, reading B in place where it can.
#include <hwy/cache_control.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/delta_rule_chunk.h"
#include "ops/common/delta_rule_rows.h"
#include "ops/kimi_delta_attention/cpu_kernel.h"
#include "ops/kimi_delta_attention/vjp/cpu_chunk_rows.h"
#include "ops/kimi_delta_attention/vjp/cpu_kernel.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kimi_delta_attention/vjp/cpu_chunk.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;

GemmOperand rows(const float* data, int64_t ld) { return {DType::kF32, data, ld}; }
GemmOperand transposed(const float* data, int64_t ld) { return {DType::kF32, data, ld, true}; }
// C (+)= A B, B read in place where the engine can: a chunk's operands are small and in L2.
void gemm(const GemmOperand& a, const GemmOperand& b, int64_t M, int64_t N, int64_t K, float* c,
          int64_t ldc, bool accumulate) {
  cpu_gemm_f32(a, b, M, N, K, c, ldc, accumulate, CpuGemmOptions{.rhs_in_place = true});
}

// A = diag(beta) A'.
void scale_ap(const KdaVjpChunk& c, float* A) {
  for (int64_t t = 0; t < c.n; ++t) delta_rule_scale(c.Ap + t * c.n, c.beta[t], A + t * c.n, c.n);
}

// Rows scaled in place, row i of [rows, n] by f[i].
void scale_rows(const float* f, int64_t rows, int64_t n, float* X) {
  for (int64_t i = 0; i < rows; ++i) {
    float* x = X + i * n;
    const float fi = f[i];
#pragma GCC ivdep
    for (int64_t e = 0; e < n; ++e) x[e] *= fi;
  }
}

// dot[i] = G_i . S_i, then G_i *= f_i: one pass over G's rows [rows, n].
void dot_then_scale(const float* S, const float* f, int64_t rows, int64_t n, float* G, float* dot) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  constexpr int64_t kAhead = 8;  // rows of S prefetched ahead of the one read
  for (int64_t i = 0; i < rows; ++i) {
    float* g = G + i * n;
    const float* s = S + i * n;
    if (i + kAhead < rows) {
      for (int64_t e = 0; e < n; e += 64 / sizeof(float)) hwy::Prefetch(s + kAhead * n + e);
    }
    const auto fi = hn::Set(d, f[i]);
    auto acc0 = hn::Zero(d), acc1 = hn::Zero(d);
    int64_t e = 0;
    for (; e + 2 * L <= n; e += 2 * L) {
      const auto g0 = hn::LoadU(d, g + e), g1 = hn::LoadU(d, g + e + L);
      acc0 = hn::MulAdd(g0, hn::LoadU(d, s + e), acc0);
      acc1 = hn::MulAdd(g1, hn::LoadU(d, s + e + L), acc1);
      hn::StoreU(hn::Mul(g0, fi), d, g + e);
      hn::StoreU(hn::Mul(g1, fi), d, g + e + L);
    }
    float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
    for (; e < n; ++e) {
      sum += g[e] * s[e];
      g[e] *= f[i];
    }
    dot[i] = sum;
  }
}

}  // namespace

void ChunkAdvance(const KdaVjpChunk& c, float* S) {
  const int64_t n = c.n, K = c.K, V = c.V;
  const KdaVjpChunkRows x = kda_vjp_chunk_rows(c, /*backward=*/false, kKdaSubChunk * n + n * n);
  float* GR = x.extra;
  float* A = GR + kKdaSubChunk * n;
  float* U = c.U;
  kda_vjp_chunk_products(x, /*q_rows=*/false, /*diagonal=*/false, c.Ap, GR);
  // U = diag(beta) (v - Kd S_0), then solved in place.
  gemm(rows(x.Kd, K), rows(S, V), n, V, K, U, V, /*accumulate=*/false);
  for (int64_t t = 0; t < n; ++t) {
    const float bt = c.beta[t];
    const float* vt = c.v + t * V;
    float* ut = U + t * V;
#pragma GCC ivdep
    for (int64_t e = 0; e < V; ++e) ut[e] = bt * (vt[e] - ut[e]);
  }
  scale_ap(c, A);
  delta_rule_solve_lower(A, n, U, V);
  // S_n = diag(sd) S_0 + Kr^T U, in place.
  scale_rows(x.sd, K, V, S);
  gemm(transposed(x.Kr, K), rows(U, V), K, V, n, S, V, /*accumulate=*/true);
}

void ChunkBackward(const KdaVjpChunk& c, float* G, float* dq, float* dk, float* dv, float* dbeta,
                   float* dg) {
  const int64_t n = c.n, K = c.K, V = c.V, sub = kKdaSubChunk;
  // The forward's residuals, written a whole forward ago, on their way while the rows below are
  // computed (U's first read is a product's packing, A''s a scaling; both stalled on it).
  for (int64_t e = 0; e < n * V; e += 64 / sizeof(float)) hwy::Prefetch(c.U + e);
  for (int64_t e = 0; e < n * n; e += 64 / sizeof(float)) hwy::Prefetch(c.Ap + e);
  // Z = [dout; dY] [2n, V], dY first dU solved in place; dQd and X = dY S_0^T adjacent (one
  // product writes both), dKr, db [n, K]; A, P, dP, dA [n, n] (dP and dA adjacent); dsd [K];
  // GR [2 sub, max(n, K)]; M [2 sub, n]; GC [n, K]; XQ [2n, K].
  const KdaVjpChunkRows x =
      kda_vjp_chunk_rows(c, /*backward=*/true,
                         2 * n * V + 4 * n * K + 4 * n * n + K + 2 * sub * std::max(n, K) +
                             2 * sub * n + n * K + 2 * n * K);
  const float* U = c.U;
  float* Z = x.extra;
  float* dY = Z + n * V;
  float* dQd = dY + n * V;
  float* X = dQd + n * K;
  float* dKr = X + n * K;
  float* db = dKr + n * K;
  float* A = db + n * K;
  float* P = A + n * n;
  float* dP = P + n * n;
  float* dA = dP + n * n;
  float* dsd = dA + n * n;
  float* GR = dsd + K;
  float* M = GR + 2 * sub * std::max(n, K);
  float* GC = M + 2 * sub * n;
  float* XQ = GC + n * K;
  kda_vjp_chunk_products(x, /*q_rows=*/true, /*diagonal=*/true, P, GR);
  scale_ap(c, A);
  // dU = P^T dout + Kr dS_n (in dY's rows); dKr; dsd.
  gemm(transposed(P, n), rows(c.dout, V), n, V, n, dY, V, /*accumulate=*/false);
  gemm(rows(x.Kr, K), rows(G, V), n, V, K, dY, V, /*accumulate=*/true);
  gemm(rows(U, V), transposed(G, V), n, K, V, dKr, K, /*accumulate=*/false);
  // dsd; dS_n's rows scaled by sd (dS_0's first term; dS_n is not read again before dS_0).
  dot_then_scale(c.S0, x.sd, K, V, G, dsd);
  // (I + A)^T dY = dU.
  delta_rule_solve_lower_transposed(A, n, dY, V);
  // Z packed once for its two products: [dP; -dA] = Z U^T, dA kept for s < t, dP for s <= t;
  // [dQd; X] = Z S_0^T.
  std::copy_n(c.dout, n * V, Z);
  thread_local GemmPackStorage packed_z;
  const CpuGemmOptions options{.rhs_in_place = true};
  const PackedGemmOperand z = pack_gemm_lhs(rows(Z, V), 2 * n, V, options, packed_z);
  cpu_gemm_f32(z, transposed(U, V), n, dP, n, /*accumulate=*/false, options);
  cpu_gemm_f32(z, transposed(c.S0, V), K, dQd, K, /*accumulate=*/false, options);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t s = 0; s < n; ++s) dA[t * n + s] = s < t ? -dA[t * n + s] : 0.0f;
    for (int64_t s = t + 1; s < n; ++s) dP[t * n + s] = 0.0f;
  }
  // dv = dR0 = diag(beta) dY; dbeta, with dY_t . R0_t = dY_t . v_t - Kd_t . X_t.
  for (int64_t t = 0; t < n; ++t) {
    dbeta[t] = delta_rule_dot(dY + t * V, c.v + t * V, V) -
               delta_rule_dot(x.Kd + t * K, X + t * K, K) +
               delta_rule_dot(dA + t * n, c.Ap + t * n, t);
    delta_rule_scale(dY + t * V, c.beta[t], dv + t * V, V);
  }
  // dS_0 = diag(sd) dS_n + [Qd; -Kd]^T [dout; dR0] = diag(sd) dS_n + [Qd; -diag(beta) Kd]^T Z
  // (diag(sd) dS_n in G already).
  std::copy_n(x.Qd, n * K, XQ);
  for (int64_t t = 0; t < n; ++t) delta_rule_scale(x.Kd + t * K, -c.beta[t], XQ + (n + t) * K, K);
  gemm(transposed(XQ, K), rows(Z, V), K, V, 2 * n, G, V, /*accumulate=*/true);
  // The elementwise terms of Kd, Qd, Kr, with dKd = -dR0 S_0^T = -diag(beta) X: dk = dKd
  // exp(b) + dKr exp(b_{n-1} - b), dq = dQd exp(b), db; and sd's.
  const float* e_last = x.E_last();
  const float* f_last = x.F_last();
  for (int64_t t = 0; t < n; ++t) {
    const float bt = c.beta[t];
    const float* er = x.e_r_of(t);
#pragma GCC ivdep
    for (int64_t i = 0; i < K; ++i) {
      const int64_t e = t * K + i;
      const float dkd = -bt * X[e];
      const float eb = er[i] * x.E[e];  // exp(b), and exp(b_{n-1} - b) below (KdaVjpChunkRows)
      dk[e] = dkd * eb + dKr[e] * (e_last[i] * f_last[e]);
      dq[e] = dQd[e] * eb;
      db[e] = dkd * x.Kd[e] + dQd[e] * x.Qd[e] - dKr[e] * x.Kr[e];
    }
  }
  float* db_last = db + (n - 1) * K;
#pragma GCC ivdep
  for (int64_t i = 0; i < K; ++i) db_last[i] += dsd[i] * x.sd[i];
  for (int64_t t = 0; t < n; ++t) {
    const float* dkr = dKr + t * K;
    const float* kr = x.Kr + t * K;
#pragma GCC ivdep
    for (int64_t i = 0; i < K; ++i) db_last[i] += dkr[i] * kr[i];
  }
  // The pairwise products' gradients per sub-chunk: M = [beta_t dA; dP] rows of J.
  for (int64_t s0 = 0; s0 < n; s0 += sub) {
    const int64_t m = x.rows_of(s0), cols = s0 + m;
    const float* L = x.L(s0);
    const float* R = x.R(s0);
    const float* F = x.F(s0);
    for (int64_t t = s0; t < s0 + m; ++t) {
#pragma GCC ivdep
      for (int64_t s = 0; s < cols; ++s) {
        M[(t - s0) * cols + s] = c.beta[t] * dA[t * n + s];
        M[(m + t - s0) * cols + s] = dP[t * n + s];
      }
    }
    // Rows: GR = M R; columns: GC = M^T L.
    gemm(rows(M, cols), rows(R, K), 2 * m, K, cols, GR, K, /*accumulate=*/false);
    gemm(transposed(M, cols), rows(L, K), cols, K, 2 * m, GC, K, /*accumulate=*/false);
    for (int64_t t = s0; t < s0 + m; ++t) {
      const float* gk = GR + (t - s0) * K;
      const float* gq = GR + (m + t - s0) * K;
      const float* lk = L + (t - s0) * K;
      const float* lq = L + (m + t - s0) * K;
      const float* et = x.E + t * K;
      float* dkt = dk + t * K;
      float* dqt = dq + t * K;
      float* dbt = db + t * K;
#pragma GCC ivdep
      for (int64_t i = 0; i < K; ++i) {
        dkt[i] += et[i] * gk[i];
        dqt[i] += et[i] * gq[i];
        dbt[i] += lk[i] * gk[i] + lq[i] * gq[i];
      }
    }
#pragma GCC ivdep
    for (int64_t e = 0; e < cols * K; ++e) {
      dk[e] += F[e] * GC[e];
      db[e] -= R[e] * GC[e];
    }
  }
  // dg = the reverse cumulative sum of db.
  std::copy_n(db + (n - 1) * K, K, dg + (n - 1) * K);
  for (int64_t t = n - 2; t >= 0; --t) {
    const float* dbt = db + t * K;
    const float* next = dg + (t + 1) * K;
    float* out = dg + t * K;
#pragma GCC ivdep
    for (int64_t i = 0; i < K; ++i) out[i] = dbt[i] + next[i];
  }
  // g_0 only decays S_0: from a zero state (a slot's start) its gradient is exactly zero, where
  // the sum above leaves the roundoff of terms that cancel.
  if (std::all_of(c.S0, c.S0 + K * V, [](float v) { return v == 0.0f; })) {
    std::fill_n(dg, K, 0.0f);
  }
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(ChunkAdvance);
HWY_EXPORT(ChunkBackward);

void kda_vjp_chunk(const KdaVjpChunk& c, float* G, float* dq, float* dk, float* dv, float* dbeta,
                   float* dg) {
  HWY_DYNAMIC_DISPATCH(ChunkBackward)(c, G, dq, dk, dv, dbeta, dg);
}

void kda_chunk_advance(const KdaVjpChunk& c, float* S) { HWY_DYNAMIC_DISPATCH(ChunkAdvance)(c, S); }

}  // namespace tokamax
#endif  // HWY_ONCE
