// kimi_delta_attention: the float64 oracle of out and final_state: the recurrence in double for
// every (head, batch row) a sample needs, with a bound on what an f32 implementation may be off.
//
// Dimensions: as base.h; u the f32 unit roundoff.
//
// Error model. Each state slot carries e, a bound on the Frobenius norm of the computed state's
// error. Per valid token, with D = diag(exp g), the step is S' = (I - beta k k^T) D S + beta k
// v^T, so an error already in S is multiplied by at most rho = max(exp g) max(1, |1 - beta
// |k|^2|) (1 for l2-normalized keys and g <= 0: errors add up over T, they do not grow), and
// the step adds its own: D's rounding and the decay's (the activation off by 8u (|g| + |A g_f|
// + 1) under use_gate_in_kernel, exp by 4u), the K-term k^T D S (K + 2 roundings, and the
// normalized k off by (K + 8) u), r = v - k^T D S, the rank-1 update and its add. Then
//   e' = rho e + delta,  out_c off by at most |q| e' + ((K + 2) u + e_q) (|q|^T |S'|)_c,
// and final_state by e. Every bound is taken 1.5 times over (second-order terms).
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/kimi_delta_attention/base.h"

namespace tokamax {

template <>
OracleSample ProblemOp<KdaProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                           std::string_view output,
                                           std::span<const int64_t> index) const {
  const KdaProblem p = KdaProblem::from(args);
  const bool is_out = output == "out";
  if (!is_out && !(output == "final_state" && p.output_final_state)) {
    throw InvalidArgument("kimi_delta_attention has no output '" + std::string(output) + "'");
  }
  const int64_t H = p.H, B = p.B, T = p.T, K = p.K, V = p.V, N = p.N;
  const double u = unit_roundoff(DType::kF32);
  auto get = [&](const char* name, int64_t e) { return inputs.at(name).get(e); };
  const int32_t* ids = p.has_segments ? inputs.at("segment_ids").data<int32_t>() : nullptr;
  // Samples by (h, b): out samples by token, state samples (all at the end).
  std::map<int64_t, std::vector<size_t>> by_head;
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t h = is_out ? index[s] / (B * T * V) : index[s] / (K * V) % H;
    const int64_t b = is_out ? index[s] / (T * V) % B : index[s] / (N * H * K * V);
    by_head[h * B + b].push_back(s);
  }
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.assign(index.size(), 0.0);
  sample.magnitude.assign(index.size(), 0.0);
  const double e_norm = p.use_qk_l2norm ? (K + 8.0) * u : 0.0;
  std::vector<double> q(static_cast<size_t>(K)), k(static_cast<size_t>(K)),
      d(static_cast<size_t>(K)), r(static_cast<size_t>(V));
  for (const auto& [hb, samples] : by_head) {
    const int64_t h = hb / B, b = hb % B;
    // The samples of each token (out), or all of them at the end (final_state).
    std::map<int64_t, std::vector<size_t>> at_token;
    for (const size_t s : samples) at_token[is_out ? index[s] / V % T : T].push_back(s);
    std::vector<double> S(static_cast<size_t>(N * K * V), 0.0), err(static_cast<size_t>(N), 0.0);
    if (p.has_initial_state) {
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t e = 0; e < K * V; ++e) {
          S[n * K * V + e] = get("initial_state", ((b * N + n) * H + h) * K * V + e);
        }
      }
    }
    const int64_t last = at_token.rbegin()->first;
    for (int64_t t = 0; t < std::min(last + 1, T); ++t) {
      const int64_t seg = ids ? ids[b * T + t] : 1;
      if (seg < 1 || seg > N) continue;  // out 0 exactly (the samples' defaults)
      double* St = S.data() + (seg - 1) * K * V;
      double& e = err[seg - 1];
      const int64_t row = (h * B + b) * T + t;
      double nq2 = 0.0, nk2 = 0.0;
      for (int64_t i = 0; i < K; ++i) {
        q[i] = get("query", row * K + i);
        k[i] = get("key", row * K + i);
        nq2 += q[i] * q[i];
        nk2 += k[i] * k[i];
      }
      const double rq = p.use_qk_l2norm ? 1.0 / std::sqrt(nq2 + 1e-6) : 1.0;
      const double rk = p.use_qk_l2norm ? 1.0 / std::sqrt(nk2 + 1e-6) : 1.0;
      double nq = 0.0, nk = 0.0, dmax = 0.0, e_d = 0.0;
      for (int64_t i = 0; i < K; ++i) {
        q[i] *= rq * p.scale;
        k[i] *= rk;
        nq += q[i] * q[i];
        nk += k[i] * k[i];
        const double gate = get("gate", row * K + i);
        const double a_log = inputs.contains("a_log") ? get("a_log", h) : 0.0;
        const double dtb =
            inputs.contains("delta_time_bias") ? get("delta_time_bias", h * K + i) : 0.0;
        const double g = kda_log_decay<double>(p, gate, a_log, dtb);
        d[i] = std::exp(g);
        dmax = std::max(dmax, d[i]);
        const double e_g =
            p.use_gate_in_kernel
                ? 8.0 * u * (std::fabs(g) + std::exp(a_log) * std::fabs(gate + dtb) + 1.0)
                : 0.0;
        e_d = std::max(e_d, e_g + 4.0 * u);
      }
      nq = std::sqrt(nq);
      nk = std::sqrt(nk);
      const double beta = get("beta", row);
      double ds_norm = 0.0, r_norm = 0.0;
      for (int64_t i = 0; i < K; ++i) {
        for (int64_t c = 0; c < V; ++c) {
          St[i * V + c] *= d[i];
          ds_norm += St[i * V + c] * St[i * V + c];
        }
      }
      ds_norm = std::sqrt(ds_norm);
      for (int64_t c = 0; c < V; ++c) {
        double pred = 0.0;
        for (int64_t i = 0; i < K; ++i) pred += k[i] * St[i * V + c];
        r[c] = get("value", row * V + c) - pred;
        r_norm += r[c] * r[c];
      }
      r_norm = std::sqrt(r_norm);
      double s_norm = 0.0;
      for (int64_t i = 0; i < K; ++i) {
        for (int64_t c = 0; c < V; ++c) {
          St[i * V + c] += beta * k[i] * r[c];
          s_norm += St[i * V + c] * St[i * V + c];
        }
      }
      s_norm = std::sqrt(s_norm);
      const double rho = dmax * std::max(1.0, std::fabs(1.0 - beta * nk * nk));
      const double delta = ds_norm * (e_d + u) +
                           beta * nk * nk * ds_norm * ((K + 2.0) * u + 2.0 * e_norm) +
                           beta * nk * r_norm * (2.0 * e_norm + 3.0 * u) + 2.0 * u * s_norm;
      e = rho * e + delta;
      const auto it = at_token.find(t);
      if (it == at_token.end()) continue;
      const double e_q = e_norm + 2.0 * u;
      for (const size_t s : it->second) {
        const int64_t c = index[s] % V;
        double value = 0.0, terms = 0.0;
        for (int64_t i = 0; i < K; ++i) {
          value += q[i] * St[i * V + c];
          terms += std::fabs(q[i] * St[i * V + c]);
        }
        sample.value[s] = value;
        sample.magnitude[s] = 1.5 * (nq * e + ((K + 2.0) * u + e_q) * terms) / u;
      }
    }
    if (!is_out) {
      for (const size_t s : samples) {
        const int64_t n = index[s] / (H * K * V) % N, e = index[s] % (K * V);
        sample.value[s] = S[n * K * V + e];
        sample.magnitude[s] = 1.5 * err[n] / u;
      }
    }
  }
  return sample;
}

}  // namespace tokamax
