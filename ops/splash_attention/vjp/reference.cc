// splash_attention_vjp: the portable reference, upstream's attention_reference_vjp per q head
// and row in f32 over every key, and the "reference" implementation.
//
// Dimensions: as base.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/framework/reference_implementation.h"
#include "ops/splash_attention/mask.h"
#include "ops/splash_attention/vjp/base.h"

namespace tokamax {

void splash_attention_vjp_reference(const SplashAttentionVjpProblem& vp, const TensorMap& inputs,
                                    TensorMap& outputs) {
  const SplashAttentionProblem& p = vp.fwd;
  const SplashMask mask = SplashMask::of(p.mask, p.T, p.t, inputs);
  auto load = [](const Tensor& x) {
    std::vector<float> out(static_cast<size_t>(x.num_elements()));
    for (int64_t e = 0; e < x.num_elements(); ++e) out[e] = static_cast<float>(x.get(e));
    return out;
  };
  const std::vector<float> q = load(inputs.at("q")), k = load(inputs.at("k")),
                           v = load(inputs.at("v")), dout = load(inputs.at("dout"));
  std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
  std::vector<float> dsinks(static_cast<size_t>(p.Hq), 0.0f);
  const float mask_value = static_cast<float>(p.mask_value);
  const float cap = static_cast<float>(p.soft_cap);
  const int64_t T = p.T, t = p.t, D = p.D, d = p.d;
  std::vector<float> z(static_cast<size_t>(t)), s(static_cast<size_t>(t)),
      pr(static_cast<size_t>(t)), dp(static_cast<size_t>(t)), out(static_cast<size_t>(d));
  for (int64_t hq = 0; hq < p.Hq; ++hq) {
    const int64_t h = hq / p.groups();
    const float sink = p.has_sinks ? static_cast<float>(inputs.at("sinks").get(hq))
                                   : -std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < T; ++r) {
      const float* qr = q.data() + (hq * T + r) * D;
      const float* dr = dout.data() + (hq * T + r) * d;
      float m = sink;
      for (int64_t j = 0; j < t; ++j) {
        float dot = 0.0f;
        for (int64_t x = 0; x < D; ++x) dot += qr[x] * k[(h * t + j) * D + x];
        z[j] = dot;
        s[j] = mask.visible(r, j) ? (cap > 0.0f ? cap * std::tanh(dot / cap) : dot) : mask_value;
        m = std::max(m, s[j]);
      }
      // The forward's lse and out (the latter for dsinks only).
      float l = p.has_sinks ? std::exp(sink - m) : 0.0f;
      std::fill(out.begin(), out.end(), 0.0f);
      for (int64_t j = 0; j < t; ++j) {
        const float w = std::exp(s[j] - m);
        l += w;
        for (int64_t c = 0; c < d; ++c) out[c] += w * v[(h * t + j) * d + c];
      }
      for (float& x : out) x /= l;
      float lse = m + std::log(l);
      if (vp.has_lse) lse = inputs.at("logsumexp").data<float>()[hq * T + r];
      if (vp.has_out) {
        for (int64_t c = 0; c < d; ++c) {
          out[c] = static_cast<float>(inputs.at("out").get((hq * T + r) * d + c));
        }
      }
      // P with upstream's backward mask value, then dP, Di and dS.
      const auto masked = static_cast<float>(splash_masked_weight(lse));
      float di = 0.0f;
      for (int64_t j = 0; j < t; ++j) {
        pr[j] = mask.visible(r, j) ? std::exp(s[j] - lse) : masked;
        float dot = 0.0f;
        for (int64_t c = 0; c < d; ++c) dot += dr[c] * v[(h * t + j) * d + c];
        dp[j] = dot;
        di += pr[j] * dot;
      }
      for (int64_t j = 0; j < t; ++j) {
        if (pr[j] == 0.0f) continue;
        float ds = pr[j] * (dp[j] - di);
        if (cap > 0.0f) {
          const float th = std::tanh(z[j] / cap);
          ds *= 1.0f - th * th;
        }
        for (int64_t c = 0; c < d; ++c) dv[(h * t + j) * d + c] += pr[j] * dr[c];
        for (int64_t x = 0; x < D; ++x) {
          dq[(hq * T + r) * D + x] += ds * k[(h * t + j) * D + x];
          dk[(h * t + j) * D + x] += ds * qr[x];
        }
      }
      if (p.has_sinks) {
        float od = 0.0f;
        for (int64_t c = 0; c < d; ++c) od += out[c] * dr[c];
        dsinks[hq] -= std::exp(sink - lse) * od;
      }
    }
  }
  auto store = [](const std::vector<float>& x, Tensor& y) {
    for (int64_t e = 0; e < y.num_elements(); ++e) y.set(e, x[e]);
  };
  store(dq, outputs.at("dq"));
  store(dk, outputs.at("dk"));
  store(dv, outputs.at("dv"));
  if (p.has_sinks) store(dsinks, outputs.at("dsinks"));
}

namespace {

void run_reference(const SplashAttentionVjpProblem& problem, const TensorMap& inputs,
                   TensorMap& outputs) {
  splash_attention_vjp_reference(problem, inputs, outputs);
}

}  // namespace

const Implementation& splash_attention_vjp_reference_implementation() {
  static const ReferenceImplementation<SplashAttentionVjpProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
