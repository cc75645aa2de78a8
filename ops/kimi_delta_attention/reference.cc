// kimi_delta_attention: the decay's activation and the portable reference (upstream's
// reference.py token by token, in f32; f64 for f64 inputs).
//
// Dimensions: as base.h.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/framework/reference_implementation.h"
#include "ops/kimi_delta_attention/base.h"

namespace tokamax {

template <typename Acc>
Acc kda_log_decay(const KdaProblem& p, Acc gate, Acc a_log, Acc delta_time_bias) {
  if (!p.use_gate_in_kernel) return gate;
  const Acc g = gate + delta_time_bias, A = std::exp(a_log);
  if (p.lower_bound) {
    return static_cast<Acc>(*p.lower_bound) / (Acc(1) + std::exp(-A * g));  // lb sigmoid(A g)
  }
  // -A softplus(g), softplus(g) = max(g, 0) + log1p(exp(-|g|)).
  return -A * (std::max(g, Acc(0)) + std::log1p(std::exp(-std::fabs(g))));
}

template float kda_log_decay<float>(const KdaProblem&, float, float, float);
template double kda_log_decay<double>(const KdaProblem&, double, double, double);

void kimi_delta_attention_reference(const KdaProblem& p, const TensorMap& inputs,
                                    TensorMap& outputs) {
  const int64_t H = p.H, B = p.B, T = p.T, K = p.K, V = p.V, N = p.N;
  auto load = [&](const char* name) {
    std::vector<float> x;
    if (!inputs.contains(name)) return x;
    const Tensor& t = inputs.at(name);
    x.resize(static_cast<size_t>(t.num_elements()));
    for (int64_t e = 0; e < t.num_elements(); ++e) x[e] = static_cast<float>(t.get(e));
    return x;
  };
  const std::vector<float> q = load("query"), k = load("key"), v = load("value"),
                           gate = load("gate"), beta = load("beta"), a_log = load("a_log"),
                           dtb = load("delta_time_bias"), init = load("initial_state");
  std::vector<float> states(static_cast<size_t>(B * N * H * K * V), 0.0f);
  if (!init.empty()) std::copy(init.begin(), init.end(), states.begin());
  std::vector<float> out(static_cast<size_t>(H * B * T * V), 0.0f);
  std::vector<float> qh(static_cast<size_t>(K)), kh(static_cast<size_t>(K)),
      decay(static_cast<size_t>(K)), r(static_cast<size_t>(V));
  const int32_t* ids = p.has_segments ? inputs.at("segment_ids").data<int32_t>() : nullptr;
  auto normalize = [&](float* x) {
    if (!p.use_qk_l2norm) return;
    float sum = 0.0f;
    for (int64_t i = 0; i < K; ++i) sum += x[i] * x[i];
    const float rstd = 1.0f / std::sqrt(sum + 1e-6f);
    for (int64_t i = 0; i < K; ++i) x[i] *= rstd;
  };
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        const int64_t seg = ids ? ids[b * T + t] : 1;
        if (seg < 1 || seg > N) continue;  // padding: zeros out, states unchanged
        float* S = states.data() + ((b * N + (seg - 1)) * H + h) * K * V;
        const int64_t row = (h * B + b) * T + t;
        std::copy_n(q.data() + row * K, K, qh.data());
        std::copy_n(k.data() + row * K, K, kh.data());
        normalize(qh.data());
        normalize(kh.data());
        for (int64_t i = 0; i < K; ++i) {
          qh[i] *= static_cast<float>(p.scale);
          decay[i] =
              std::exp(kda_log_decay<float>(p, gate[row * K + i], a_log.empty() ? 0.0f : a_log[h],
                                            dtb.empty() ? 0.0f : dtb[h * K + i]));
        }
        for (int64_t i = 0; i < K; ++i) {
          for (int64_t c = 0; c < V; ++c) S[i * V + c] *= decay[i];
        }
        for (int64_t c = 0; c < V; ++c) {
          float pred = 0.0f;
          for (int64_t i = 0; i < K; ++i) pred += kh[i] * S[i * V + c];
          r[c] = v[row * V + c] - pred;
        }
        const float bt = beta[row];
        for (int64_t i = 0; i < K; ++i) {
          for (int64_t c = 0; c < V; ++c) S[i * V + c] += bt * kh[i] * r[c];
        }
        for (int64_t c = 0; c < V; ++c) {
          float o = 0.0f;
          for (int64_t i = 0; i < K; ++i) o += qh[i] * S[i * V + c];
          out[row * V + c] = o;
        }
      }
    }
  }
  Tensor& o = outputs.at("out");
  for (int64_t e = 0; e < o.num_elements(); ++e) o.set(e, out[e]);
  if (p.output_final_state) {
    Tensor& f = outputs.at("final_state");
    for (int64_t e = 0; e < f.num_elements(); ++e) f.set(e, states[e]);
  }
}

namespace {

void run_reference(const KdaProblem& problem, const TensorMap& inputs, TensorMap& outputs) {
  kimi_delta_attention_reference(problem, inputs, outputs);
}

}  // namespace

const Implementation& kimi_delta_attention_reference_implementation() {
  static const ReferenceImplementation<KdaProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
