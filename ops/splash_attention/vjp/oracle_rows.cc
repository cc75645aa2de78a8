// splash_attention_vjp: a row of the exact backward and its error terms.
//
// Dimensions: as base.h.
//
// Error model (units of u, per row (hq, r); as dot_product_attention_vjp's, base_numerics.cc
// there). A row that sees n keys:
//  - each capped logit is off by at most Delta = (D + 6) sum |q k| + 8 |s_j|, so each
//    P_j = exp(s_j - lse) is off by a relative eP = expm1(2 Delta u) / u + 3n + 2R + 32 +
//    |lse| + 4 (R the range of the row's logits and sink; the last two for lse given in f32);
//  - dP_j = dout . v_j: (d + 1) A_j, A_j = sum_c |dout_c v_jc|;
//  - Di = sum_j P_j dP_j (or dout . out, out rounded to q's dtype when given): E_D = M_D (eP +
//    n + d + 4 + u_bf16 / u for bf16) + (u_out / u) sum_c |dout_c out_c|, M_D = sum_j P_j A_j;
//  - dS_j = P_j (dP_j - Di) G_j: E_j = P_j [(eP + 4 + kCap) |dP_j - Di| + (d + 1) A_j + E_D],
//    kCap = Delta / c + 4 under the cap c.
// A row that sees no key has P_j = w_r for every key, w_r from the f32 lse exactly as the
// kernels compute it (eP = 4: one exp), with n = t.
#include "ops/splash_attention/vjp/oracle_rows.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tokamax {
namespace {

std::vector<double> load(const Tensor& x) {
  std::vector<double> out(static_cast<size_t>(x.num_elements()));
  for (int64_t e = 0; e < x.num_elements(); ++e) out[e] = x.get(e);
  return out;
}

}  // namespace

SplashVjpRows::SplashVjpRows(const SplashAttentionVjpProblem& vp, const TensorMap& inputs)
    : vp_(vp),
      inputs_(inputs),
      mask_(SplashMask::of(vp.fwd.mask, vp.fwd.T, vp.fwd.t, inputs)),
      q_(load(inputs.at("q"))),
      k_(load(inputs.at("k"))),
      v_(load(inputs.at("v"))),
      dout_(inputs.contains("dout") ? load(inputs.at("dout")) : std::vector<double>{}) {}

SplashVjpRow SplashVjpRows::row(int64_t hq, int64_t r, bool with_cotangent) const {
  const SplashAttentionProblem& p = vp_.fwd;
  const int64_t h = hq / p.groups(), t = p.t, D = p.D, d = p.d;
  const double u = unit_roundoff(DType::kF32), cap = p.soft_cap;
  const double sink =
      p.has_sinks ? inputs_.at("sinks").get(hq) : -std::numeric_limits<double>::infinity();
  const double* qr = q_.data() + (hq * p.T + r) * D;
  SplashVjpRow row;
  std::vector<double> z, s;  // per entry of keys: uncapped and capped logits
  std::vector<double> abs_qk;
  auto add_key = [&](int64_t j) {
    double dot = 0.0, abs_dot = 0.0;
    for (int64_t x = 0; x < D; ++x) {
      const double term = qr[x] * k_[(h * t + j) * D + x];
      dot += term;
      abs_dot += std::fabs(term);
    }
    row.keys.push_back(j);
    z.push_back(dot);
    s.push_back(cap > 0.0 ? cap * std::tanh(dot / cap) : dot);
    abs_qk.push_back(abs_dot);
  };
  const bool keyless = mask_.count(r) == 0;
  double delta_logit = 0.0, keyless_weight = 0.0;
  row.out.assign(static_cast<size_t>(d), 0.0);
  if (!keyless) {
    for (const auto& [lo, hi] : mask_.runs(r)) {
      for (int64_t j = lo; j < hi; ++j) add_key(j);
    }
    double max = sink, min = p.has_sinks ? sink : std::numeric_limits<double>::infinity();
    for (size_t e = 0; e < s.size(); ++e) {
      max = std::max(max, s[e]);
      min = std::min(min, s[e]);
      delta_logit = std::max(delta_logit, (D + 6.0) * abs_qk[e] + 8.0 * std::fabs(s[e]));
    }
    double sum = p.has_sinks ? std::exp(sink - max) : 0.0;
    row.p.resize(s.size());
    for (size_t e = 0; e < s.size(); ++e) sum += (row.p[e] = std::exp(s[e] - max));
    row.lse = max + std::log(sum);
    for (size_t e = 0; e < s.size(); ++e) {
      row.p[e] /= sum;
      for (int64_t c = 0; c < d; ++c) row.out[c] += row.p[e] * v_[(h * t + row.keys[e]) * d + c];
    }
    row.eP = std::expm1(2.0 * delta_logit * u) / u + 3.0 * static_cast<double>(s.size()) +
             2.0 * (max - min) + 32.0 + std::fabs(row.lse) + 4.0;
  } else {
    const SplashKeylessRow keyless_row = splash_keyless_row(p, sink);
    row.lse = keyless_row.lse;
    keyless_weight = keyless_row.weight;
    for (int64_t j = 0; j < t; ++j) {
      for (int64_t c = 0; c < d; ++c) {
        row.out[c] += keyless_row.weight / static_cast<double>(t) * v_[(h * t + j) * d + c];
      }
    }
    // The kernels' w_r from the f32 lse (the input, or the forward's rounded).
    const float lse32 = vp_.has_lse ? inputs_.at("logsumexp").data<float>()[hq * p.T + r]
                                    : static_cast<float>(row.lse);
    const double w = splash_masked_weight(lse32);
    if (w > 0.0) {
      for (int64_t j = 0; j < t; ++j) add_key(j);
      row.p.assign(row.keys.size(), w);
      for (size_t e = 0; e < z.size(); ++e) {
        delta_logit = std::max(delta_logit, (D + 6.0) * abs_qk[e] + 8.0 * std::fabs(s[e]));
      }
    }
    row.eP = 4.0;
  }
  if (!with_cotangent) return row;
  const double* dr = dout_.data() + (hq * p.T + r) * d;
  const size_t n = row.keys.size();
  std::vector<double> dp(n), A(n);
  double M = 0.0;
  row.delta = 0.0;
  for (size_t e = 0; e < n; ++e) {
    const double* vj = v_.data() + (h * t + row.keys[e]) * d;
    for (int64_t c = 0; c < d; ++c) {
      dp[e] += dr[c] * vj[c];
      A[e] += std::fabs(dr[c] * vj[c]);
    }
    row.delta += row.p[e] * dp[e];
    M += row.p[e] * A[e];
  }
  const double p_rounding = p.dtype == DType::kBF16 ? unit_roundoff(DType::kBF16) / u : 0.0;
  row.e_delta = M * (row.eP + static_cast<double>(n) + d + 4.0 + p_rounding);
  double dout_out = 0.0;
  for (int64_t c = 0; c < d; ++c) dout_out += std::fabs(dr[c] * row.out[c]);
  if (vp_.has_out) row.e_delta += unit_roundoff(p.dtype) / u * dout_out;
  row.od = 0.0;
  for (int64_t c = 0; c < d; ++c) row.od += dr[c] * row.out[c];
  row.e_od = row.e_delta;
  if (keyless) {
    // out = weight mean_j v_j, then out . dout: t + d + 8 roundings of the terms.
    double terms = 0.0;
    for (int64_t j = 0; j < t; ++j) {
      for (int64_t c = 0; c < d; ++c) terms += std::fabs(v_[(h * t + j) * d + c] * dr[c]);
    }
    row.e_od = (t + d + 8.0) * keyless_weight / static_cast<double>(t) * terms +
               (vp_.has_out ? unit_roundoff(p.dtype) / u * dout_out : 0.0);
  }
  const double k_cap = cap > 0.0 ? delta_logit / cap + 4.0 : 0.0;
  row.ds.resize(n);
  row.es.resize(n);
  for (size_t e = 0; e < n; ++e) {
    double gate = 1.0;
    if (cap > 0.0) {
      const double th = std::tanh(z[e] / cap);
      gate = 1.0 - th * th;
    }
    row.ds[e] = row.p[e] * (dp[e] - row.delta) * gate;
    row.es[e] = row.p[e] * ((row.eP + 4.0 + k_cap) * std::fabs(dp[e] - row.delta) +
                            (d + 1.0) * A[e] + row.e_delta);
  }
  return row;
}

}  // namespace tokamax
