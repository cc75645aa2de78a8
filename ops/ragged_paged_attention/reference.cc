// ragged_paged_attention: the portable reference, upstream's computation as f32 loops per valid
// token and head over its visible keys (the cache updated first), and its implementation.
#include <cmath>
#include <limits>
#include <vector>

#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/reference_implementation.h"
#include "ops/ragged_paged_attention/base.h"

namespace tokamax {

void ragged_paged_attention_reference(const RaggedPagedAttentionProblem& p, const TensorMap& inputs,
                                      TensorMap& outputs) {
  const RpaTokens tokens(p);
  const Tensor* cache = &inputs.at("kv_cache");
  if (!p.skip_kv_update) {
    rpa_update_cache(p, tokens, inputs, outputs.at("updated_kv_cache"));
    cache = &outputs.at("updated_kv_cache");
  }
  const Tensor& q = inputs.at("queries");
  Tensor& out = outputs.at("out");
  float* lse = p.return_lse ? outputs.at("lse").data<float>() : nullptr;
  std::vector<float> logit, acc(static_cast<size_t>(p.D));
  for (int64_t t = 0; t < p.Tq; ++t) {
    for (int64_t hq = 0; hq < p.Hq; ++hq) {
      const int64_t s = tokens.seq[t], h = hq / p.groups(), row = (t * p.Hq + hq) * p.D;
      std::fill(acc.begin(), acc.end(), 0.0f);
      float max = -std::numeric_limits<float>::infinity(), sum = 0.0f;
      if (s >= 0) {
        const auto [lo, hi] = RpaTokens::key_range(p, s, tokens.pos[t]);
        logit.assign(static_cast<size_t>(hi - lo), 0.0f);
        for (int64_t j = lo; j < hi; ++j) {
          const int64_t k_at = rpa_cache_at(p, s, j, h, 0);
          float dot = 0.0f;
          for (int64_t x = 0; x < p.D; ++x) {
            dot += static_cast<float>(q.get(row + x)) / static_cast<float>(p.q_scale) *
                   (static_cast<float>(cache->get(k_at + x)) / static_cast<float>(p.k_scale));
          }
          float z = static_cast<float>(p.sm_scale) * dot;
          if (p.soft_cap > 0.0) {
            const float c = static_cast<float>(p.soft_cap);
            z = c * std::tanh(z / c);
          }
          logit[j - lo] = z;
          max = std::max(max, z);
        }
        for (int64_t j = lo; j < hi; ++j) {
          const float w = std::exp(logit[j - lo] - max);
          sum += w;
          const int64_t v_at = rpa_cache_at(p, s, j, h, 1);
          for (int64_t c = 0; c < p.D; ++c) {
            acc[c] +=
                w * (static_cast<float>(cache->get(v_at + c)) / static_cast<float>(p.v_scale));
          }
        }
      }
      for (int64_t c = 0; c < p.D; ++c) out.set(row + c, sum > 0.0f ? acc[c] / sum : 0.0);
      if (lse) {
        lse[t * p.Hq + hq] =
            sum > 0.0f ? max + std::log(sum) : -std::numeric_limits<float>::infinity();
      }
    }
  }
}

namespace {

void run_reference(const RaggedPagedAttentionProblem& problem, const TensorMap& inputs,
                   TensorMap& outputs) {
  ragged_paged_attention_reference(problem, inputs, outputs);
}

}  // namespace

const Implementation& ragged_paged_attention_reference_implementation() {
  static const ReferenceImplementation<RaggedPagedAttentionProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
