// kimi_delta_attention_vjp: the backward sweep of one (head, batch row) in plain loops, shared by
// the reference (f32) and the float64 oracle (which also bounds what an f32 implementation may
// be off: kBound).
//
// Dimensions: as ../base.h; u the f32 unit roundoff.
//
// Error bounds (kBound). The forward state of each slot carries e (a Frobenius-norm bound, as
// the forward's oracle.cc derives it; errors add up over the tokens). The adjoint dS carries eps
// backward the same way: the step dS <- D (I - beta k^ k^T) (dS + q^ dout^T) multiplies an error
// already in dS by at most rho = max(d) max(1, |1 - beta |k^|^2|) and adds its own roundings
// (the rank-1 adds, dr's K-term sums, the decay's product and D's error). Each gradient element
// is a short sum of products of a state (S_t, S', dS or dS') with a vector: its bound is the
// vector's norm times the state's error, the state's norm times the vector's error, and
// (n + 2) u times its sum of |products|; then through the normalization (the norm's error
// (K + 8) u) and the gate's derivative (8 u relative), and for da_log and ddelta_time_bias summed
// over the tokens with (T K + 2) u of their terms.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/framework/dtype.h"
#include "ops/framework/tensor.h"
#include "ops/kimi_delta_attention/vjp/base.h"
#include "ops/kimi_delta_attention/vjp/tape.h"

namespace tokamax {

// The gradients of one (head, batch row): values in Acc, and with kBound their error bounds
// (absolute, before the outputs' own rounding).
template <typename Acc, bool kBound>
struct KdaVjpGrads {
  std::vector<Acc> dq, dk, dv, dgate, dbeta, ddtb,
      dinit;  // [T K] [T K] [T V] [T K] [T] [K] [N K V]
  Acc da_log = 0;
  std::vector<double> eq, ek, ev, egate, ebeta, edtb, einit;
  double ea_log = 0.0;
};

// g's derivatives with respect to the gate value (dg_dx) and a_log (dg_da), as kda_log_decay.
template <typename Acc>
void kda_log_decay_grad(const KdaProblem& p, Acc gate, Acc a_log, Acc dtb, Acc& dg_dx, Acc& dg_da) {
  if (!p.use_gate_in_kernel) {
    dg_dx = Acc(1);
    dg_da = Acc(0);
    return;
  }
  const Acc x = gate + dtb, A = std::exp(a_log);
  if (p.lower_bound) {
    const Acc lb = static_cast<Acc>(*p.lower_bound);
    const Acc s = Acc(1) / (Acc(1) + std::exp(-A * x));
    dg_dx = lb * s * (Acc(1) - s) * A;
    dg_da = dg_dx * x;
    return;
  }
  const Acc s = Acc(1) / (Acc(1) + std::exp(-x));
  dg_dx = -A * s;
  dg_da = kda_log_decay<Acc>(p, gate, a_log, dtb);
}

template <typename Acc, bool kBound>
void kda_vjp_sweep(const KdaVjpProblem& vp, const TensorMap& inputs, int64_t h, int64_t b,
                   // Outputs.
                   KdaVjpGrads<Acc, kBound>& out) {
  const KdaProblem& p = vp.fwd;
  const int64_t H = p.H, B = p.B, T = p.T, K = p.K, V = p.V, N = p.N, KV = K * V;
  const double u = unit_roundoff(DType::kF32);
  const KdaVjpTask<Acc> task{vp, inputs, h, b};
  auto get = [&](const char* name, int64_t e) { return task.get(name, e); };
  auto slot_of = [&](int64_t t) { return task.slot_of(t); };
  const Acc a_log = task.a_log(), scale = static_cast<Acc>(p.scale);
  const double e_norm = task.e_norm();
  auto norm2 = [](const Acc* v, int64_t n) { return kda_vjp_norm(v, n); };
  KdaVjpTape<Acc> tape;
  kda_vjp_record<Acc, kBound>(task, tape);
  const auto& [qh, kh, gt, gg, dd, vv, rr, nq, nk, bt, before, e_before, e_dec] = tape;
  // Backward.
  out.dq.assign(T * K, Acc(0));
  out.dk.assign(T * K, Acc(0));
  out.dv.assign(T * V, Acc(0));
  out.dgate.assign(T * K, Acc(0));
  out.dbeta.assign(T, Acc(0));
  out.ddtb.assign(K, Acc(0));
  out.dinit.assign(N * KV, Acc(0));
  out.da_log = 0;
  if constexpr (kBound) {
    out.eq.assign(T * K, 0.0);
    out.ek.assign(T * K, 0.0);
    out.ev.assign(T * V, 0.0);
    out.egate.assign(T * K, 0.0);
    out.ebeta.assign(T, 0.0);
    out.edtb.assign(K, 0.0);
    out.einit.assign(N * KV, 0.0);
    out.ea_log = 0.0;
  }
  std::vector<Acc> dS(N * KV, Acc(0));
  std::vector<double> eps(N, 0.0);
  if (vp.has_dfinal_state) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t e = 0; e < KV; ++e)
        dS[n * KV + e] = get("dfinal_state", ((b * N + n) * H + h) * KV + e);
    }
  }
  std::vector<Acc> Sp(KV), dqh(K), dkh(K), dr(V), xr(K), dg(K), dout(V);
  std::vector<double> e_dqh(K), e_dkh(K), e_dg(K), t_dqh(K), t_dkh(K), t_dg(K);
  double a_terms = 0.0, a_prop = 0.0;
  std::vector<double> dtb_terms(K, 0.0), dtb_prop(K, 0.0);
  for (int64_t t = T - 1; t >= 0; --t) {
    const int64_t n = slot_of(t);
    if (n < 0) continue;
    const int64_t row = (h * B + b) * T + t;
    const Acc* q = qh.data() + t * K;
    const Acc* k = kh.data() + t * K;
    const Acc* r = rr.data() + t * V;
    const Acc* d = dd.data() + t * K;
    const Acc beta = bt[t];
    Acc* G = dS.data() + n * KV;
    for (int64_t c = 0; c < V; ++c) dout[c] = get("dout", row * V + c);
    for (int64_t i = 0; i < K; ++i) {
      for (int64_t c = 0; c < V; ++c) Sp[i * V + c] = d[i] * before[t * KV + i * V + c];
    }
    // out_t = S_t^T q^: dS += q^ dout^T, dq^_i = sum_c S_t,ic dout_c.
    for (int64_t i = 0; i < K; ++i) {
      Acc s = 0;
      double terms = 0.0;
      for (int64_t c = 0; c < V; ++c) {
        const Acc st = Sp[i * V + c] + beta * k[i] * r[c];
        s += st * dout[c];
        if constexpr (kBound) terms += std::fabs(static_cast<double>(st * dout[c]));
        G[i * V + c] += q[i] * dout[c];
      }
      dqh[i] = s;
      t_dqh[i] = terms;
    }
    // S_t = S' + beta k^ r^T.
    for (int64_t c = 0; c < V; ++c) {
      Acc s = 0;
      for (int64_t i = 0; i < K; ++i) s += G[i * V + c] * k[i];
      dr[c] = beta * s;
    }
    Acc dbeta = 0;
    for (int64_t i = 0; i < K; ++i) {
      Acc s = 0, s2 = 0;
      double terms = 0.0;
      for (int64_t c = 0; c < V; ++c) {
        s += G[i * V + c] * r[c];
        s2 += Sp[i * V + c] * dr[c];
        if constexpr (kBound) {
          terms += std::fabs(static_cast<double>(beta * G[i * V + c] * r[c])) +
                   std::fabs(static_cast<double>(Sp[i * V + c] * dr[c]));
        }
      }
      xr[i] = s;
      dbeta += k[i] * s;
      dkh[i] = beta * s - s2;
      t_dkh[i] = terms;
    }
    // r = v - S'^T k^: dv = dr, dS' = dS - k^ dr^T; dg_i = sum_c dS'_ic S'_ic; dS <- D dS'.
    for (int64_t i = 0; i < K; ++i) {
      Acc s = 0;
      double terms = 0.0;
      for (int64_t c = 0; c < V; ++c) {
        G[i * V + c] -= k[i] * dr[c];
        s += G[i * V + c] * Sp[i * V + c];
        if constexpr (kBound) terms += std::fabs(static_cast<double>(G[i * V + c] * Sp[i * V + c]));
      }
      dg[i] = s;
      t_dg[i] = terms;
    }
    if constexpr (kBound) {
      // The states' norms and errors at this token (S' and S_t from S_{t-1}'s e; dS's eps).
      double g_norm = 0.0, gp_norm = 0.0, sp_norm = 0.0, st_norm = 0.0;
      const double e_d = e_dec[t];
      double dmax = 0.0;
      for (int64_t i = 0; i < K; ++i) dmax = std::max(dmax, static_cast<double>(d[i]));
      for (int64_t e = 0; e < KV; ++e) {
        gp_norm += static_cast<double>(G[e]) * G[e];
        sp_norm += static_cast<double>(Sp[e]) * Sp[e];
        const double st = Sp[e] + beta * k[e / V] * r[e % V];
        st_norm += st * st;
        const double gi = G[e] + static_cast<double>(k[e / V]) * dr[e % V];  // dS before dS'
        g_norm += gi * gi;
      }
      g_norm = std::sqrt(g_norm);
      gp_norm = std::sqrt(gp_norm);
      sp_norm = std::sqrt(sp_norm);
      st_norm = std::sqrt(st_norm);
      const double kn = norm2(k, K), r_norm = norm2(r, V), dr_norm = norm2(dr.data(), V);
      double dout_norm = 0.0;
      for (int64_t c = 0; c < V; ++c) dout_norm += static_cast<double>(dout[c]) * dout[c];
      dout_norm = std::sqrt(dout_norm);
      const double e_sp = dmax * e_before[t] + (e_d + u) * sp_norm;
      const double e_r = kn * e_sp + sp_norm * e_norm + (K + 2.0) * u * sp_norm * kn;
      const double e_st = e_sp + beta * (kn * e_r + r_norm * e_norm) + 3.0 * u * st_norm;
      // dS with this token's q^ dout^T: eps + its rounding and q^'s error.
      const double e_g = eps[n] + dout_norm * (e_norm + 2.0 * u) + 2.0 * u * g_norm;
      const double e_dr = beta * (kn * e_g + g_norm * e_norm + (K + 2.0) * u * g_norm * kn);
      for (int64_t c = 0; c < V; ++c) out.ev[t * V + c] = e_dr;
      for (int64_t i = 0; i < K; ++i) {
        e_dqh[i] = dout_norm * e_st + (V + 2.0) * u * t_dqh[i];
        e_dkh[i] = beta * (r_norm * e_g + g_norm * e_r) + (dr_norm * e_sp + sp_norm * e_dr) +
                   (V + 2.0) * u * t_dkh[i];
        e_dg[i] = gp_norm * e_sp + sp_norm * (e_g + kn * e_dr + dr_norm * e_norm) +
                  (V + 2.0) * u * t_dg[i];
      }
      double dbeta_terms = 0.0;
      for (int64_t i = 0; i < K; ++i) dbeta_terms += std::fabs(static_cast<double>(k[i] * xr[i]));
      out.ebeta[t] = kn * (r_norm * e_g + g_norm * e_r) + g_norm * r_norm * e_norm +
                     (K * V + 2.0) * u * (dbeta_terms + g_norm * r_norm * kn);
      // dS' = (I - beta k^ k^T) dS: the incoming error times at most rho, then D dS'.
      const double rho = std::max(1.0, std::fabs(1.0 - beta * kn * kn));
      const double e_gp = rho * e_g +
                          kn * ((K + 2.0) * u * beta * g_norm * kn + 2.0 * e_norm * beta * g_norm) +
                          2.0 * u * gp_norm;
      eps[n] = dmax * e_gp + (e_d + u) * gp_norm;
    }
    for (int64_t i = 0; i < K; ++i) {
      for (int64_t c = 0; c < V; ++c) G[i * V + c] *= d[i];
    }
    for (int64_t c = 0; c < V; ++c) out.dv[t * V + c] = dr[c];
    out.dbeta[t] = dbeta;
    // Through the normalization: x^ = x / n_x, dx = (dx^ - x^ (x^ . dx^)) / n_x (q^ also scaled).
    auto unnormalize = [&](const Acc* xh, Acc nx, Acc s, const Acc* dxh, const double* e_in,
                           const double* t_in, Acc* dx, double* e_out) {
      if (!p.use_qk_l2norm) {
        for (int64_t i = 0; i < K; ++i) {
          dx[i] = s * dxh[i];
          if constexpr (kBound)
            e_out[i] = std::fabs(static_cast<double>(s)) *
                       (e_in[i] + u * std::fabs(static_cast<double>(dxh[i])));
        }
        return;
      }
      Acc dot = 0;
      double e_dot = 0.0, t_dot = 0.0;
      for (int64_t i = 0; i < K; ++i) {
        const Acc xb = xh[i] / s;  // x / n_x
        dot += xb * dxh[i];
        if constexpr (kBound) {
          e_dot += std::fabs(static_cast<double>(xb)) * e_in[i];
          t_dot += std::fabs(static_cast<double>(xb * dxh[i]));
        }
      }
      for (int64_t i = 0; i < K; ++i) {
        const Acc xb = xh[i] / s;
        dx[i] = s * (dxh[i] - xb * dot) / nx;
        if constexpr (kBound) {
          const double f = std::fabs(static_cast<double>(s / nx));
          e_out[i] =
              f * (e_in[i] + std::fabs(static_cast<double>(xb)) * (e_dot + (K + 2.0) * u * t_dot) +
                   (e_norm + 4.0 * u) * (std::fabs(static_cast<double>(dxh[i])) +
                                         2.0 * std::fabs(static_cast<double>(xb * dot))));
        }
      }
      (void)t_in;
    };
    unnormalize(q, nq[t], scale, dqh.data(), e_dqh.data(), t_dqh.data(), out.dq.data() + t * K,
                kBound ? out.eq.data() + t * K : nullptr);
    unnormalize(k, nk[t], Acc(1), dkh.data(), e_dkh.data(), t_dkh.data(), out.dk.data() + t * K,
                kBound ? out.ek.data() + t * K : nullptr);
    // Through the gate's activation.
    for (int64_t i = 0; i < K; ++i) {
      const Acc dtb = task.dtb(i);
      Acc dg_dx, dg_da;
      kda_log_decay_grad<Acc>(p, gt[t * K + i], a_log, dtb, dg_dx, dg_da);
      const Acc dx = dg[i] * dg_dx;
      out.dgate[t * K + i] = dx;
      out.ddtb[i] += dx;
      out.da_log += dg[i] * dg_da;
      if constexpr (kBound) {
        const double e_x = std::fabs(static_cast<double>(dg_dx)) *
                           (e_dg[i] + 8.0 * u * (std::fabs(static_cast<double>(dg[i])) + t_dg[i]));
        out.egate[t * K + i] = e_x;
        dtb_prop[i] += e_x;
        dtb_terms[i] += std::fabs(static_cast<double>(dx));
        a_prop += std::fabs(static_cast<double>(dg_da)) *
                  (e_dg[i] + 8.0 * u * std::fabs(static_cast<double>(dg[i])));
        a_terms += std::fabs(static_cast<double>(dg[i] * dg_da));
      }
    }
  }
  for (int64_t n = 0; n < N; ++n) {
    std::copy_n(dS.data() + n * KV, KV, out.dinit.data() + n * KV);
    if constexpr (kBound) std::fill_n(out.einit.data() + n * KV, KV, eps[n]);
  }
  if constexpr (kBound) {
    const double len = static_cast<double>(T) * K + 2.0;
    for (int64_t i = 0; i < K; ++i) out.edtb[i] = dtb_prop[i] + (T + 2.0) * u * dtb_terms[i];
    out.ea_log = a_prop + len * u * a_terms;
  }
}

}  // namespace tokamax
