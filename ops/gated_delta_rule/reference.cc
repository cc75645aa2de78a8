// gated_delta_rule: the portable reference, upstream's reference.py step for step in f32: the
// shared conv (gdn_conv_silu), then per request and value head the recurrence token by token
// in upstream's order of operations, the state rounded to its dtype after every token.
//
// Dimensions: as base.h.
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/reference_implementation.h"
#include "ops/gated_delta_rule/base.h"

namespace tokamax {

void gated_delta_rule_reference(const GdnProblem& p, const TensorMap& inputs, TensorMap& outputs) {
  const int64_t C = p.C, dk = p.d_k, dv = p.d_v, KV = dk * dv;
  std::vector<float> mixed(static_cast<size_t>(p.T * C));
  gdn_conv_silu(p, inputs, 1, GdnConvLayout::kTokenMajor, mixed.data(),
                outputs.at("updated_conv_state"));
  Tensor& out = outputs.at("out");
  out.fill_zero();
  Tensor& state = outputs.at("updated_recurrent_state");
  const Tensor& old_state = inputs.at("recurrent_state");
  std::memcpy(state.raw(), old_state.raw(), old_state.size_bytes());
  auto get = [&](const char* name, int64_t e) {
    return static_cast<float>(inputs.at(name).get(e));
  };
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  std::vector<float> S(static_cast<size_t>(KV)), q(static_cast<size_t>(dk)),
      k(static_cast<size_t>(dk)), ks(static_cast<size_t>(dv)), qs(static_cast<size_t>(dv));
  auto l2_normalize = [](std::vector<float>& x) {
    float sum = 0.0f;
    for (const float e : x) sum += e * e;
    const float norm = std::sqrt(sum + 1e-6f);
    for (float& e : x) e /= norm;
  };
  for (int64_t r = 0; r < p.R; ++r) {
    const int64_t slot = p.state_indices[r];
    for (int64_t h = 0; h < p.n_v; ++h) {
      const int64_t at = (slot * p.n_v + h) * KV;
      for (int64_t e = 0; e < KV; ++e) {
        S[e] = p.has_initial_state(r) ? static_cast<float>(state.get(at + e)) : 0.0f;
      }
      const int64_t L = r < p.active() ? p.tokens(r) : 0;
      for (int64_t j = 0; j < L; ++j) {
        const int64_t t = p.query_start_loc[r] + j;
        const float* y = mixed.data() + t * C;
        const int64_t hk = h / p.repeat();
        for (int64_t i = 0; i < dk; ++i) {
          q[i] = y[hk * dk + i];
          k[i] = y[p.n_kq * dk + hk * dk + i];
        }
        const float* v = y + 2 * p.n_kq * dk + h * dv;
        const float beta = gdn_beta<float>(get("b", t * p.n_v + h));
        const float g =
            gdn_log_decay<float>(get("a", t * p.n_v + h), get("a_log", h), get("dt_bias", h));
        l2_normalize(q);
        l2_normalize(k);
        for (float& e : q) e *= scale;
        const float decay = std::exp(g);
        for (int64_t c = 0; c < dv; ++c) {
          float kc = 0.0f, qc = 0.0f;
          for (int64_t i = 0; i < dk; ++i) {
            kc += k[i] * S[i * dv + c];
            qc += q[i] * S[i * dv + c];
          }
          ks[c] = kc;
          qs[c] = qc;
        }
        float qk = 0.0f;
        for (int64_t i = 0; i < dk; ++i) qk += q[i] * k[i];
        for (int64_t c = 0; c < dv; ++c) {
          const float v_new = beta * (v[c] - decay * ks[c]);
          out.set(t * p.n_v * dv + h * dv + c, decay * qs[c] + qk * v_new);
          for (int64_t i = 0; i < dk; ++i) {
            float& s = S[i * dv + c];
            s = s * decay + k[i] * v_new;
          }
        }
        // upstream writes the state back in its dtype after every token
        if (p.state_dtype != DType::kF32) {
          for (float& s : S) s = round_through(p.state_dtype, s);
        }
      }
      for (int64_t e = 0; e < KV; ++e) state.set(at + e, S[e]);
    }
  }
}

namespace {

void run_reference(const GdnProblem& problem, const TensorMap& inputs, TensorMap& outputs) {
  gated_delta_rule_reference(problem, inputs, outputs);
}

}  // namespace

const Implementation& gated_delta_rule_reference_implementation() {
  static const ReferenceImplementation<GdnProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
