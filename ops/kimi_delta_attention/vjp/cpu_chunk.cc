// kimi_delta_attention_vjp on CPU: one chunk's backward in the WY form (cpu_kernel.h:
// kda_vjp_chunk), its products on the GEMM engine.
//
// Dimensions: as ../base.h; n the chunk's tokens (t, s), m a sub-chunk's, `cols` the columns a
// sub-chunk's rows see (every token up to its last).
//
// The forward of a chunk from its state S_0 (ops/common/delta_rule_chunk.h), with b the
// cumulative log decays, Kd = k exp(b), Qd = q exp(b), Kr = k exp(b_{n-1} - b), sd =
// exp(b_{n-1}), A = diag(beta) A' and P the decayed products:
//   R0 = v - Kd S_0;  Y = diag(beta) R0;  (I + A) U = Y;
//   out = Qd S_0 + P U;  S_n = diag(sd) S_0 + Kr^T U.
// Backward from dout and dS_n:
//   dU = P^T dout + Kr dS_n;  dP = dout U^T (s <= t);  dQd = dout S_0^T;  dKr = U dS_n^T;
//   (I + A)^T dY = dU;  dA = -dY U^T (s < t);  dR0 = diag(beta) dY = dv;
//   dbeta_t = dY_t . R0_t + sum_s dA[t, s] A'[t, s];  dKd = -dR0 S_0^T;
//   dS_0 = diag(sd) dS_n + Qd^T dout - Kd^T dR0;
// then the decays: each pairwise product A'[t, s] = k_t . (k_s exp(b_t - b_s)) (P with q_t)
// factors through its sub-chunk's first token r as the forward's (../cpu_chunk.cc), so its
// gradients are two GEMMs per sub-chunk: rows t take exp(b_t - b_r) (M R), columns s take
// exp(b_r - b_s) (M^T L), and b gets +x_t . (row sums) and -x_s . (column sums). Kd, Qd, Kr and
// sd add their elementwise terms, and dg is the reverse cumulative sum of db.
//
// Compiled once per SIMD target by Highway: its elementwise loops (n K and n n per chunk)
// vectorize for the target; the products call the GEMM engine.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/delta_rule_chunk.h"
#include "ops/common/delta_rule_rows.h"
#include "ops/kimi_delta_attention/cpu_kernel.h"
#include "ops/kimi_delta_attention/vjp/cpu_kernel.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kimi_delta_attention/vjp/cpu_chunk.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace {

GemmOperand rows(const float* data, int64_t ld) { return {DType::kF32, data, ld}; }
GemmOperand transposed(const float* data, int64_t ld) {
  GemmOperand op{DType::kF32, data, ld};
  op.transposed = true;
  return op;
}

}  // namespace

// advance: only S <- S_n (G holds S and c.S0 points to it; c.q and c.dout unused).
void VjpChunk(const KdaVjpChunk& c, bool advance, float* G, float* dq, float* dk, float* dv,
              float* dbeta, float* dg) {
  const int64_t n = c.n, K = c.K, V = c.V, sub = kKdaSubChunk;
  thread_local std::vector<float> scratch;
  // b, E (exp(b_t - b_r) of t's sub-chunk), Kd, Qd, Kr, dQd, dKr, dKd, db [n, K]; R0, U, dU,
  // dY [n, V]; A', P, dP, dA [n, n]; sd, dsd [K]; L [2 sub, K], R [n, K], F [n, K]; M [2 sub,
  // n]; GR [2 sub, K], GC [n, K]; XQ [2n, K], Z [2n, V].
  // The sub-chunks' factors are kept from the forward part for the backward part: L per
  // sub-chunk [2 sub, K], R and F per sub-chunk [n, K].
  const int64_t subs = (n + sub - 1) / sub;
  const int64_t need = 9 * n * K + 4 * n * V + 4 * n * n + 2 * K +
                       subs * (2 * sub * K + 2 * n * K) + 2 * sub * n + 2 * sub * K + n * K +
                       2 * n * K + 2 * n * V;
  if (static_cast<int64_t>(scratch.size()) < need) scratch.resize(static_cast<size_t>(need));
  float* b = scratch.data();
  float* E = b + n * K;
  float* Kd = E + n * K;
  float* Qd = Kd + n * K;
  float* Kr = Qd + n * K;
  float* dQd = Kr + n * K;  // dQd and dKd adjacent: one product writes both
  float* dKd = dQd + n * K;
  float* dKr = dKd + n * K;
  float* db = dKr + n * K;
  float* R0 = db + n * K;
  float* U = R0 + n * V;
  float* dU = U + n * V;
  float* dY = dU + n * V;
  float* Ap = dY + n * V;
  float* P = Ap + n * n;
  float* dP = P + n * n;
  float* dA = dP + n * n;
  float* sd = dA + n * n;
  float* dsd = sd + K;
  float* L_all = dsd + K;
  float* R_all = L_all + subs * 2 * sub * K;
  float* F_all = R_all + subs * n * K;
  float* M = F_all + subs * n * K;
  float* GR = M + 2 * sub * n;
  float* GC = GR + 2 * sub * K;
  float* XQ = GC + n * K;
  float* Z = XQ + 2 * n * K;
  const float* q = c.q;
  const float* k = c.k;
  for (int64_t t = 0; t < n; ++t) {
#pragma GCC ivdep
    for (int64_t i = 0; i < K; ++i) b[t * K + i] = c.g[t * K + i] + (t ? b[(t - 1) * K + i] : 0.0f);
  }
  const float* b_last = b + (n - 1) * K;
  std::vector<float> ones(static_cast<size_t>(K), 1.0f), zeros(static_cast<size_t>(K), 0.0f);
  // Forward: the decayed rows, A' and P per sub-chunk, R0 and U.
  // exp(b_t) and exp(b_{n-1} - b_t) per token, kept for the backward's elementwise terms.
  thread_local std::vector<float> exps;
  if (static_cast<int64_t>(exps.size()) < 2 * n * K) exps.resize(static_cast<size_t>(2 * n * K));
  float* e_b = exps.data();
  float* e_end = e_b + n * K;
  for (int64_t t = 0; t < n; ++t) {
    const float* bt = b + t * K;
    delta_rule_scale_exp(ones.data(), zeros.data(), bt, 1.0f, false, e_b + t * K, K);
    delta_rule_scale_exp(ones.data(), bt, b_last, 1.0f, false, e_end + t * K, K);
#pragma GCC ivdep
    for (int64_t i = 0; i < K; ++i) {
      const int64_t e = t * K + i;
      Kd[e] = k[e] * e_b[e];
      Kr[e] = k[e] * e_end[e];
      if (!advance) Qd[e] = q[e] * e_b[e];
    }
  }
  delta_rule_scale_exp(ones.data(), zeros.data(), b_last, 1.0f, false, sd, K);
  std::fill_n(Ap, n * n, 0.0f);
  std::fill_n(P, n * n, 0.0f);
  // Sub-chunk J's factors: L = [k_t exp(b_t - b_r); q_t exp(b_t - b_r)] for t in J, R_s = k_s
  // exp(b_r - b_s) (1 / exp(b_s - b_r) within J), F_s the factor alone, E_t exp(b_t - b_r).
  auto factors = [&](int64_t s0, int64_t m, float* L, float* R, float* F) {
    const float* br = b + s0 * K;
    for (int64_t t = s0; t < s0 + m; ++t) {
      float* et = E + t * K;
      delta_rule_scale_exp(ones.data(), br, b + t * K, 1.0f, false, et, K);
      float* lk = L + (t - s0) * K;
      float* lq = L + (m + t - s0) * K;
#pragma GCC ivdep
      for (int64_t i = 0; i < K; ++i) lk[i] = k[t * K + i] * et[i];
      if (!advance) {
#pragma GCC ivdep
        for (int64_t i = 0; i < K; ++i) lq[i] = q[t * K + i] * et[i];
      }
    }
    for (int64_t s = 0; s < s0 + m; ++s) {
      delta_rule_scale_exp(ones.data(), b + s * K, br, 1.0f, s >= s0, F + s * K, K);
#pragma GCC ivdep
      for (int64_t i = 0; i < K; ++i) R[s * K + i] = k[s * K + i] * F[s * K + i];
    }
  };
  for (int64_t s0 = 0; s0 < n; s0 += sub) {
    const int64_t m = std::min(sub, n - s0), cols = s0 + m;
    const int64_t J = s0 / sub;
    float* L = L_all + J * 2 * sub * K;
    float* R = R_all + J * n * K;
    factors(s0, m, L, R, F_all + J * n * K);
    const int64_t lhs_rows = advance ? m : 2 * m;  // advancing needs A' only, not P
    cpu_gemm_f32(rows(L, K), transposed(R, K), lhs_rows, cols, K, GR, cols, /*accumulate=*/false);
    for (int64_t t = s0; t < s0 + m; ++t) {
      for (int64_t s = 0; s < t; ++s) Ap[t * n + s] = GR[(t - s0) * cols + s];
      if (advance) continue;
      for (int64_t s = 0; s <= t; ++s) P[t * n + s] = GR[(m + t - s0) * cols + s];
    }
  }
  // A = diag(beta) A' in dA's storage until dA is needed.
  float* A = dA;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t s = 0; s < n; ++s) A[t * n + s] = c.beta[t] * Ap[t * n + s];
  }
  cpu_gemm_f32(rows(Kd, K), rows(c.S0, V), n, V, K, R0, V, /*accumulate=*/false);
  for (int64_t t = 0; t < n; ++t) {
    float* r0 = R0 + t * V;
    float* u = U + t * V;
    const float* vt = c.v + t * V;
    const float bt = c.beta[t];
#pragma GCC ivdep
    for (int64_t x = 0; x < V; ++x) {
      r0[x] = vt[x] - r0[x];
      u[x] = bt * r0[x];
    }
  }
  delta_rule_solve_lower(A, n, U, V);
  if (advance) {  // S_n = diag(sd) S_0 + Kr^T U, in place
    for (int64_t i = 0; i < K; ++i) delta_rule_scale(G + i * V, sd[i], G + i * V, V);
    cpu_gemm_f32(transposed(Kr, K), rows(U, V), K, V, n, G, V, /*accumulate=*/true);
    return;
  }
  // dU = P^T dout + Kr dS_n; dKr; dsd.
  cpu_gemm_f32(transposed(P, n), rows(c.dout, V), n, V, n, dU, V, /*accumulate=*/false);
  cpu_gemm_f32(rows(Kr, K), rows(G, V), n, V, K, dU, V, /*accumulate=*/true);
  cpu_gemm_f32(rows(U, V), transposed(G, V), n, K, V, dKr, K, /*accumulate=*/false);
  for (int64_t i = 0; i < K; ++i) dsd[i] = delta_rule_dot(G + i * V, c.S0 + i * V, V);
  // (I + A)^T dY = dU.
  std::copy_n(dU, n * V, dY);
  delta_rule_solve_lower_transposed(A, n, dY, V);
  // [dP; -dA] = [dout; dY] U^T (dP and dA adjacent; dA's storage free after A's last use),
  // dA kept for s < t, dP for s <= t.
  std::copy_n(c.dout, n * V, Z);
  std::copy_n(dY, n * V, Z + n * V);
  cpu_gemm_f32(rows(Z, V), transposed(U, V), 2 * n, n, V, dP, n, /*accumulate=*/false);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t s = 0; s < n; ++s) dA[t * n + s] = s < t ? -dA[t * n + s] : 0.0f;
    for (int64_t s = t + 1; s < n; ++s) dP[t * n + s] = 0.0f;
  }
  // dv = dR0 = diag(beta) dY; dbeta.
  for (int64_t t = 0; t < n; ++t) {
    dbeta[t] =
        delta_rule_dot(dY + t * V, R0 + t * V, V) + delta_rule_dot(dA + t * n, Ap + t * n, t);
    delta_rule_scale(dY + t * V, c.beta[t], dv + t * V, V);
  }
  // [dQd; dR0 S_0^T] = [dout; dR0] S_0^T (dKd = -dR0 S_0^T: the sign goes with its uses).
  std::copy_n(dv, n * V, Z + n * V);
  cpu_gemm_f32(rows(Z, V), transposed(c.S0, V), 2 * n, K, V, dQd, K, /*accumulate=*/false);
  // dS_0 = diag(sd) dS_n + [Qd; -Kd]^T [dout; dR0].
  for (int64_t i = 0; i < K; ++i) delta_rule_scale(G + i * V, sd[i], G + i * V, V);
  for (int64_t e = 0; e < n * K; ++e) {
    XQ[e] = Qd[e];
    XQ[n * K + e] = -Kd[e];
  }
  cpu_gemm_f32(transposed(XQ, K), rows(Z, V), K, V, 2 * n, G, V, /*accumulate=*/true);
  // The elementwise terms of Kd, Qd, Kr and sd.
  for (int64_t t = 0; t < n; ++t) {
#pragma GCC ivdep
    for (int64_t i = 0; i < K; ++i) {
      const int64_t e = t * K + i;
      dk[e] = 0.0f;
      dq[e] = 0.0f;
      db[e] = -dKd[e] * Kd[e] + dQd[e] * Qd[e] - dKr[e] * Kr[e];
    }
  }
  // dk += -dKd exp(b) + dKr exp(b_{n-1} - b); dq += dQd exp(b).
  for (int64_t t = 0; t < n; ++t) {
    const float* eb = e_b + t * K;
    const float* ee = e_end + t * K;
#pragma GCC ivdep
    for (int64_t i = 0; i < K; ++i) {
      const int64_t e = t * K + i;
      dk[e] += -dKd[e] * eb[i] + dKr[e] * ee[i];
      dq[e] += dQd[e] * eb[i];
    }
  }
  float* db_last = db + (n - 1) * K;
#pragma GCC ivdep
  for (int64_t i = 0; i < K; ++i) db_last[i] += dsd[i] * sd[i];
  for (int64_t t = 0; t < n; ++t) {
    const float* dkr = dKr + t * K;
    const float* kr = Kr + t * K;
#pragma GCC ivdep
    for (int64_t i = 0; i < K; ++i) db_last[i] += dkr[i] * kr[i];
  }
  // The pairwise products' gradients per sub-chunk: M = [beta_t dA; dP] rows of J.
  for (int64_t s0 = 0; s0 < n; s0 += sub) {
    const int64_t m = std::min(sub, n - s0), cols = s0 + m;
    const int64_t J = s0 / sub;
    const float* L = L_all + J * 2 * sub * K;
    const float* R = R_all + J * n * K;
    const float* F = F_all + J * n * K;
    for (int64_t t = s0; t < s0 + m; ++t) {
#pragma GCC ivdep
      for (int64_t s = 0; s < cols; ++s) {
        M[(t - s0) * cols + s] = c.beta[t] * dA[t * n + s];
        M[(m + t - s0) * cols + s] = dP[t * n + s];
      }
    }
    // Rows: GR = M R; columns: GC = M^T L.
    cpu_gemm_f32(rows(M, cols), rows(R, K), 2 * m, K, cols, GR, K, /*accumulate=*/false);
    cpu_gemm_f32(transposed(M, cols), rows(L, K), cols, K, 2 * m, GC, K, /*accumulate=*/false);
    for (int64_t t = s0; t < s0 + m; ++t) {
      const float* gk = GR + (t - s0) * K;
      const float* gq = GR + (m + t - s0) * K;
      const float* lk = L + (t - s0) * K;
      const float* lq = L + (m + t - s0) * K;
#pragma GCC ivdep
      for (int64_t i = 0; i < K; ++i) {
        const int64_t e = t * K + i;
        dk[e] += E[e] * gk[i];
        dq[e] += E[e] * gq[i];
        db[e] += lk[i] * gk[i] + lq[i] * gq[i];
      }
    }
#pragma GCC ivdep
    for (int64_t s = 0; s < cols; ++s) {
#pragma GCC ivdep
      for (int64_t i = 0; i < K; ++i) {
        const int64_t e = s * K + i;
        dk[e] += F[e] * GC[e];
        db[e] -= R[e] * GC[e];
      }
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
  if (std::all_of(c.S0, c.S0 + K * V, [](float x) { return x == 0.0f; })) {
    std::fill_n(dg, K, 0.0f);
  }
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(VjpChunk);

void kda_vjp_chunk(const KdaVjpChunk& c, float* G, float* dq, float* dk, float* dv, float* dbeta,
                   float* dg) {
  HWY_DYNAMIC_DISPATCH(VjpChunk)(c, /*advance=*/false, G, dq, dk, dv, dbeta, dg);
}

void kda_chunk_advance(const KdaVjpChunk& c, float* S) {
  KdaVjpChunk in_place = c;
  in_place.S0 = S;
  HWY_DYNAMIC_DISPATCH(VjpChunk)
  (in_place, /*advance=*/true, S, nullptr, nullptr, nullptr, nullptr, nullptr);
}

}  // namespace tokamax
#endif  // HWY_ONCE
