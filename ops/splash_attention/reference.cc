// splash_attention: the portable reference, upstream's formula (reference.py) per head and row
// in f32 over every key.
//
// Dimensions: as base.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/framework/reference_implementation.h"
#include "ops/splash_attention/base.h"
#include "ops/splash_attention/mask.h"

namespace tokamax {

void splash_attention_reference(const SplashAttentionProblem& p, const TensorMap& inputs,
                                TensorMap& outputs) {
  const SplashMask mask = SplashMask::of(p.mask, p.T, p.t, inputs);
  const Tensor& q = inputs.at("q");
  const Tensor& k = inputs.at("k");
  const Tensor& v = inputs.at("v");
  Tensor& out = outputs.at("out");
  float* max_logits = p.return_residuals ? outputs.at("max_logits").data<float>() : nullptr;
  float* logsumexp = p.return_residuals ? outputs.at("logsumexp").data<float>() : nullptr;
  const float mask_value = static_cast<float>(p.mask_value);
  const float cap = static_cast<float>(p.soft_cap);
  std::vector<float> s(static_cast<size_t>(p.t)), acc(static_cast<size_t>(p.d));
  for (int64_t hq = 0; hq < p.Hq; ++hq) {
    const int64_t h = hq / p.groups();
    const float sink = p.has_sinks ? static_cast<float>(inputs.at("sinks").get(hq))
                                   : -std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < p.T; ++r) {
      float m = sink;
      for (int64_t j = 0; j < p.t; ++j) {
        float z = mask_value;
        if (mask.visible(r, j)) {
          z = 0.0f;
          for (int64_t x = 0; x < p.D; ++x) {
            z += static_cast<float>(q.get((hq * p.T + r) * p.D + x)) *
                 static_cast<float>(k.get((h * p.t + j) * p.D + x));
          }
          if (cap > 0.0f) z = cap * std::tanh(z / cap);
        }
        s[j] = z;
        m = std::max(m, z);
      }
      float l = p.has_sinks ? std::exp(sink - m) : 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < p.t; ++j) {
        const float w = std::exp(s[j] - m);
        if (w == 0.0f) continue;
        l += w;
        for (int64_t c = 0; c < p.d; ++c) {
          acc[c] += w * static_cast<float>(v.get((h * p.t + j) * p.d + c));
        }
      }
      for (int64_t c = 0; c < p.d; ++c) out.set((hq * p.T + r) * p.d + c, acc[c] / l);
      if (max_logits) {
        max_logits[hq * p.T + r] = m;
        logsumexp[hq * p.T + r] = m + std::log(l);
      }
    }
  }
}

namespace {

void run_reference(const SplashAttentionProblem& problem, const TensorMap& inputs,
                   TensorMap& outputs) {
  splash_attention_reference(problem, inputs, outputs);
}

}  // namespace

const Implementation& splash_attention_reference_implementation() {
  static const ReferenceImplementation<SplashAttentionProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
