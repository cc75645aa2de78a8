// kimi_delta_attention_vjp: the forward of one (head, batch row) recorded for its backward
// sweep (sweep.h): every valid token's normalized q and k, v and r, gate, log decay and decay,
// beta and the state before it, with kBound the forward state's error bound before it (the
// forward oracle's recursion, ../oracle.cc).
//
// Dimensions: as ../base.h; u the f32 unit roundoff.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/framework/dtype.h"
#include "ops/framework/tensor.h"
#include "ops/kimi_delta_attention/vjp/base.h"

namespace tokamax {

// What both passes read of one (head h, batch row b) task.
template <typename Acc>
struct KdaVjpTask {
  const KdaVjpProblem& vp;
  const TensorMap& inputs;
  int64_t h = 0, b = 0;

  const KdaProblem& p() const { return vp.fwd; }
  Acc get(const char* name, int64_t e) const { return static_cast<Acc>(inputs.at(name).get(e)); }
  // Token t's state slot, or -1 for padding.
  int64_t slot_of(int64_t t) const {
    const KdaProblem& f = vp.fwd;
    const int64_t seg = f.has_segments ? inputs.at("segment_ids").data<int32_t>()[b * f.T + t] : 1;
    return seg < 1 || seg > f.N ? -1 : seg - 1;
  }
  Acc a_log() const { return inputs.contains("a_log") ? get("a_log", h) : Acc(0); }
  Acc dtb(int64_t i) const {
    return inputs.contains("delta_time_bias") ? get("delta_time_bias", h * vp.fwd.K + i) : Acc(0);
  }
  // The normalization's error bound (its K-term sum and square root), 0 without it.
  double e_norm() const {
    return vp.fwd.use_qk_l2norm ? (vp.fwd.K + 8.0) * unit_roundoff(DType::kF32) : 0.0;
  }
};

template <typename Acc>
double kda_vjp_norm(const Acc* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return std::sqrt(s);
}

template <typename Acc>
struct KdaVjpTape {
  // q^, k^, gate, g, d [T, K]; v, r [T, V]; the norms and beta [T]; the state before each token
  // [T, K, V]; with kBound the error bound of that state and of the token's decay [T].
  std::vector<Acc> qh, kh, gt, gg, dd, vv, rr, nq, nk, bt, before;
  std::vector<double> e_before, e_dec;
};

template <typename Acc, bool kBound>
void kda_vjp_record(const KdaVjpTask<Acc>& x,
                    // Outputs.
                    KdaVjpTape<Acc>& tape) {
  const KdaProblem& p = x.p();
  const int64_t H = p.H, B = p.B, T = p.T, K = p.K, V = p.V, N = p.N, KV = K * V;
  const int64_t h = x.h, b = x.b;
  const double u = unit_roundoff(DType::kF32), e_norm = x.e_norm();
  auto get = [&](const char* name, int64_t e) { return x.get(name, e); };
  auto slot_of = [&](int64_t t) { return x.slot_of(t); };
  const Acc a_log = x.a_log(), scale = static_cast<Acc>(p.scale);
  auto& [qh, kh, gt, gg, dd, vv, rr, nq, nk, bt, before, e_before, e_dec] = tape;
  for (auto* v : {&qh, &kh, &gt, &gg, &dd}) v->assign(T * K, Acc(0));
  for (auto* v : {&vv, &rr}) v->assign(T * V, Acc(0));
  nq.assign(T, Acc(1));
  nk.assign(T, Acc(1));
  bt.assign(T, Acc(0));
  before.assign(T * KV, Acc(0));
  e_before.assign(T, 0.0);
  e_dec.assign(T, 0.0);
  std::vector<Acc> S(N * KV, Acc(0));
  std::vector<double> err(N, 0.0);
  if (p.has_initial_state) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t e = 0; e < KV; ++e)
        S[n * KV + e] = get("initial_state", ((b * N + n) * H + h) * KV + e);
    }
  }
  auto norm2 = [](const Acc* v, int64_t n) { return kda_vjp_norm(v, n); };
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = slot_of(t);
    if (n < 0) continue;
    const int64_t row = (h * B + b) * T + t;
    Acc* q = qh.data() + t * K;
    Acc* k = kh.data() + t * K;
    Acc sq = 0, sk = 0;
    for (int64_t i = 0; i < K; ++i) {
      q[i] = get("query", row * K + i);
      k[i] = get("key", row * K + i);
      sq += q[i] * q[i];
      sk += k[i] * k[i];
    }
    if (p.use_qk_l2norm) {
      nq[t] = std::sqrt(sq + Acc(1e-6));
      nk[t] = std::sqrt(sk + Acc(1e-6));
    }
    double dmax = 0.0, e_d = 0.0;
    for (int64_t i = 0; i < K; ++i) {
      q[i] = q[i] / nq[t] * scale;
      k[i] = k[i] / nk[t];
      const Acc gate = get("gate", row * K + i);
      const Acc dtb = x.dtb(i);
      gt[t * K + i] = gate;
      gg[t * K + i] = kda_log_decay<Acc>(p, gate, a_log, dtb);
      dd[t * K + i] = std::exp(gg[t * K + i]);
      if constexpr (kBound) {
        dmax = std::max(dmax, static_cast<double>(dd[t * K + i]));
        const double e_g =
            p.use_gate_in_kernel
                ? 8.0 * u *
                      (std::fabs(gg[t * K + i]) + std::exp(a_log) * std::fabs(gate + dtb) + 1.0)
                : 0.0;
        e_d = std::max(e_d, e_g + 4.0 * u);
      }
    }
    bt[t] = get("beta", row);
    Acc* St = S.data() + n * KV;
    std::copy_n(St, KV, before.data() + t * KV);
    for (int64_t i = 0; i < K; ++i) {
      for (int64_t c = 0; c < V; ++c) St[i * V + c] *= dd[t * K + i];
    }
    const double ds_norm = kBound ? norm2(St, KV) : 0.0;
    for (int64_t c = 0; c < V; ++c) {
      Acc pred = 0;
      for (int64_t i = 0; i < K; ++i) pred += k[i] * St[i * V + c];
      vv[t * V + c] = get("value", row * V + c);
      rr[t * V + c] = vv[t * V + c] - pred;
    }
    for (int64_t i = 0; i < K; ++i) {
      for (int64_t c = 0; c < V; ++c) St[i * V + c] += bt[t] * k[i] * rr[t * V + c];
    }
    if constexpr (kBound) {
      // As the forward's oracle: e' = rho e + delta.
      const double kn = norm2(k, K), r_norm = norm2(rr.data() + t * V, V);
      const double beta = bt[t], s_norm = norm2(St, KV);
      const double rho = dmax * std::max(1.0, std::fabs(1.0 - beta * kn * kn));
      const double delta = ds_norm * (e_d + u) +
                           beta * kn * kn * ds_norm * ((K + 2.0) * u + 2.0 * e_norm) +
                           beta * kn * r_norm * (2.0 * e_norm + 3.0 * u) + 2.0 * u * s_norm;
      e_before[t] = err[n];
      e_dec[t] = e_d;
      err[n] = rho * err[n] + delta;
    }
  }
}

}  // namespace tokamax
