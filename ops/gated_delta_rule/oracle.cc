// gated_delta_rule: the float64 oracle of every output: the conv, silu and the recurrence in
// double for every (request, value head) a sample needs, with a bound on what an f32
// implementation that rounds as upstream may be off.
//
// Dimensions: as base.h; u the f32 unit roundoff, u_x qkv's, u_s the recurrent state's.
//
// Error model. The conv's sum x (f32) is rounded to qkv's dtype, its bias added and rounded again
// (the first W - 1 tokens), silu(x) = x logistic(x) in qkv's dtype, every step rounded (XLA's
// order): an element of y = silu(x) is off by at most 1.1 (u_x (|x - bias| + |x|) + (W + 2) u
// sum|w in|) + 4 (u_x + u) |y| (|silu'| <= 1.1). That
// makes q, k, v off by vectors of norms dq, dk, dv; the normalized q^ and k^ by 2 dq / |q| + (d_k
// + 8) u (likewise for k). Each state carries e, a bound on the Frobenius norm of its error. Per
// token, S' = (I - beta k k^T) D S + beta k v^T (D = exp(g) I): an error already in S is
// multiplied by at most rho = exp(g) max(1, |1 - beta |k|^2|), and the step adds its own: the
// decay's (g off by 8 u (|g| + exp(a_log) |a + dt_bias| + 1), exp by 4 u), k^T D S (d_k + 2
// roundings and k's error), r = v - k^T D S (v's), beta (4 u), the rank-1 update and its add,
// and, for a state stored in bf16 or f16 after each token as upstream's reference does, u_s |S'|.
// Then
//   e' = rho e + delta,  out_c off by at most |q| e' + dq_s |S'_c| + (d_k + 2) u (|q|^T |S'|)_c,
// the final state by e; the conv state is copied exactly (bound 0). Every bound is taken 1.5
// times over (second-order terms).
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/gated_delta_rule/base.h"

namespace tokamax {
namespace {

double norm(const std::vector<double>& x) {
  double sum = 0.0;
  for (const double e : x) sum += e * e;
  return std::sqrt(sum);
}

}  // namespace

template <>
OracleSample ProblemOp<GdnProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                           std::string_view output,
                                           std::span<const int64_t> index) const {
  const GdnProblem p = GdnProblem::from(args);
  const int64_t C = p.C, W = p.W, rows = W - 1, dk = p.d_k, dv = p.d_v, KV = dk * dv, n_v = p.n_v;
  const bool is_out = output == "out", is_state = output == "updated_recurrent_state";
  if (!is_out && !is_state && output != "updated_conv_state") {
    throw InvalidArgument("gated_delta_rule has no output '" + std::string(output) + "'");
  }
  auto get = [&](const char* name, int64_t e) { return inputs.at(name).get(e); };
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.assign(index.size(), 0.0);
  sample.magnitude.assign(index.size(), 0.0);
  // Which request each token and slot belong to.
  std::vector<int64_t> request_of_token(static_cast<size_t>(p.T), -1);
  std::map<int64_t, int64_t> request_of_slot;
  for (int64_t r = 0; r < p.R; ++r) {
    request_of_slot[p.state_indices[r]] = r;
    if (r >= p.active()) continue;
    for (int64_t t = p.query_start_loc[r]; t < p.query_start_loc[r + 1]; ++t)
      request_of_token[t] = r;
  }
  // Row i of request r's conv input stream (its conv state's rows, then its tokens), channel c.
  auto stream = [&](int64_t r, int64_t i, int64_t c) -> double {
    if (i >= rows) return get("qkv", (p.query_start_loc[r] + i - rows) * C + c);
    return p.conv_from_slot(r) ? get("conv_state", (p.state_indices[r] * rows + i) * C + c) : 0.0;
  };
  if (output == "updated_conv_state") {
    for (size_t s = 0; s < index.size(); ++s) {
      const int64_t slot = index[s] / (rows * C), i = index[s] / C % rows, c = index[s] % C;
      const auto it = request_of_slot.find(slot);
      const bool updated = it != request_of_slot.end() && it->second < p.active();
      sample.value[s] =
          updated ? stream(it->second, p.tokens(it->second) + i, c) : get("conv_state", index[s]);
    }
    return sample;
  }
  const double u = unit_roundoff(DType::kF32), ux = unit_roundoff(p.dtype);
  const double us = p.state_dtype == DType::kF32 ? 0.0 : unit_roundoff(p.state_dtype);
  // Samples by (request, head): out samples by token, state samples at the request's end.
  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> by_head;
  for (size_t s = 0; s < index.size(); ++s) {
    if (is_out) {
      const int64_t t = index[s] / (n_v * dv), h = index[s] / dv % n_v;
      if (request_of_token[t] >= 0) by_head[{request_of_token[t], h}].push_back(s);
      continue;  // padding tokens: 0 exactly (the defaults)
    }
    const int64_t slot = index[s] / (n_v * KV), h = index[s] / KV % n_v;
    const auto it = request_of_slot.find(slot);
    if (it == request_of_slot.end()) {
      sample.value[s] = get("recurrent_state", index[s]);  // no request's slot: copied
      continue;
    }
    by_head[{it->second, h}].push_back(s);
  }
  // Element c of y = silu(conv) for token j of request r, and its error bound.
  auto conv_silu = [&](int64_t r, int64_t j, int64_t c, double& err) {
    double sum = 0.0, terms = 0.0;
    for (int64_t k = 0; k < W; ++k) {
      const double term = get("conv_weight", c * W + k) * stream(r, j + k, c);
      sum += term;
      terms += std::fabs(term);
    }
    const double bias = p.has_conv_bias ? get("conv_bias", c) : 0.0;
    const double x = sum + bias, y = x / (1.0 + std::exp(-x));
    err = 1.1 * (ux * (std::fabs(sum) + std::fabs(x)) + (W + 2.0) * u * terms) +
          (4.0 * ux + 4.0 * u) * std::fabs(y);
    return y;
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(dk));
  std::vector<double> q(static_cast<size_t>(dk)), k(static_cast<size_t>(dk)),
      v(static_cast<size_t>(dv)), r_vec(static_cast<size_t>(dv)), dq(static_cast<size_t>(dk)),
      dkv(static_cast<size_t>(dk)), dvv(static_cast<size_t>(dv));
  for (const auto& [key, samples] : by_head) {
    const auto [r, h] = key;
    const int64_t hk = h / p.repeat(), slot = p.state_indices[r];
    const int64_t L = r < p.active() ? p.tokens(r) : 0;
    std::map<int64_t, std::vector<size_t>> at_token;  // token j -> samples (state: at L)
    for (const size_t s : samples) {
      at_token[is_out ? index[s] / (n_v * dv) - p.query_start_loc[r] : L].push_back(s);
    }
    std::vector<double> S(static_cast<size_t>(KV), 0.0);
    if (p.has_initial_state(r)) {
      for (int64_t e = 0; e < KV; ++e) S[e] = get("recurrent_state", (slot * n_v + h) * KV + e);
    }
    double e = 0.0;
    const int64_t last = std::min(at_token.rbegin()->first + 1, L);
    for (int64_t j = 0; j < last; ++j) {
      const int64_t t = p.query_start_loc[r] + j;
      for (int64_t i = 0; i < dk; ++i) {
        q[i] = conv_silu(r, j, hk * dk + i, dq[i]);
        k[i] = conv_silu(r, j, (p.n_kq + hk) * dk + i, dkv[i]);
      }
      for (int64_t c = 0; c < dv; ++c) v[c] = conv_silu(r, j, 2 * p.n_kq * dk + h * dv + c, dvv[c]);
      const double nq = std::sqrt(norm(q) * norm(q) + 1e-6),
                   nk = std::sqrt(norm(k) * norm(k) + 1e-6);
      for (int64_t i = 0; i < dk; ++i) {
        q[i] *= scale / nq;
        k[i] /= nk;
      }
      const double n_q = norm(q), n_k = norm(k);
      const double e_q = scale * (2.0 * norm(dq) / nq + (dk + 8.0) * u) + u * n_q;
      const double e_k = 2.0 * norm(dkv) / nk + (dk + 8.0) * u;
      const double e_v = norm(dvv);
      const double a = get("a", t * n_v + h), a_log = get("a_log", h), dtb = get("dt_bias", h);
      const double g = gdn_log_decay<double>(a, a_log, dtb), d = std::exp(g);
      const double e_d =
          8.0 * u * (std::fabs(g) + std::exp(a_log) * std::fabs(a + dtb) + 1.0) + 4.0 * u;
      const double beta = gdn_beta<double>(get("b", t * n_v + h));
      for (double& x : S) x *= d;
      const double ds_norm = norm(S);
      for (int64_t c = 0; c < dv; ++c) {
        double pred = 0.0;
        for (int64_t i = 0; i < dk; ++i) pred += k[i] * S[i * dv + c];
        r_vec[c] = v[c] - pred;
      }
      const double r_norm = norm(r_vec);
      for (int64_t i = 0; i < dk; ++i) {
        for (int64_t c = 0; c < dv; ++c) S[i * dv + c] += beta * k[i] * r_vec[c];
      }
      const double s_norm = norm(S);
      const double rho = d * std::max(1.0, std::fabs(1.0 - beta * n_k * n_k));
      const double delta =
          ds_norm * (e_d + u) * std::max(1.0, std::fabs(1.0 - beta * n_k * n_k)) +
          beta * n_k * (e_v + e_k * ds_norm + (dk + 2.0) * u * n_k * ds_norm + u * r_norm) +
          beta * e_k * r_norm + 4.0 * u * beta * n_k * r_norm + 2.0 * u * s_norm + us * s_norm;
      e = rho * e + delta;
      const auto it = at_token.find(j);
      if (it == at_token.end() || !is_out) continue;
      for (const size_t s : it->second) {
        const int64_t c = index[s] % dv;
        double value = 0.0, terms = 0.0, column = 0.0;
        for (int64_t i = 0; i < dk; ++i) {
          value += q[i] * S[i * dv + c];
          terms += std::fabs(q[i] * S[i * dv + c]);
          column += S[i * dv + c] * S[i * dv + c];
        }
        sample.value[s] = value;
        sample.magnitude[s] =
            1.5 * (n_q * e + e_q * std::sqrt(column) + (dk + 2.0) * u * terms) / u;
      }
    }
    if (is_state) {
      for (const size_t s : samples) {
        sample.value[s] = S[index[s] % KV];
        sample.magnitude[s] = 1.5 * e / u;
      }
    }
  }
  return sample;
}

}  // namespace tokamax
