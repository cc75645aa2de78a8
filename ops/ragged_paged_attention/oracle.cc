// ragged_paged_attention: the float64 oracle of out, lse and the updated cache.
//
// Error model, per (token, head) row of n visible keys (units of u, the f32 roundoff), as
// dot_product_attention's (its oracle.cc): each logit sm_scale (q / q_scale) . (k / k_scale),
// capped, is off by at most Delta = (D + 6) |sm_scale| sum |q' k'| + 8 |logit| (the D-term dot
// product, the two scale divisions, the scale and the cap's tanh); the weights then move by a
// factor within exp(+-2 Delta u); the exps, the running rescales and the n-term sums add u (3n +
// 2R + 32) (R the row's logit range); the weights may be rounded to out_dtype before P V (as
// upstream casts them): + u_out. All relative to W = sum_j p_j |v_j / v_scale|. lse: Delta + 3n
// + 2R + 32 + |lse| absolutely. The updated cache is a copy: magnitude 0.
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "ops/framework/errors.h"
#include "ops/ragged_paged_attention/base.h"

namespace tokamax {

template <>
OracleSample ProblemOp<RaggedPagedAttentionProblem>::oracle(const BoundArgs& args,
                                                            const TensorMap& inputs,
                                                            std::string_view output,
                                                            std::span<const int64_t> index) const {
  const RaggedPagedAttentionProblem p = RaggedPagedAttentionProblem::from(args);
  const RpaTokens tokens(p);
  Tensor cache(args.tensor("kv_cache"));
  rpa_update_cache(p, tokens, inputs, cache);
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.assign(index.size(), 0.0);
  sample.magnitude.assign(index.size(), 0.0);
  if (output == "updated_kv_cache" && !p.skip_kv_update) {
    for (size_t s = 0; s < index.size(); ++s) sample.value[s] = cache.get(index[s]);
    return sample;
  }
  const bool lse = output == "lse" && p.return_lse;
  if (output != "out" && !lse) {
    throw InvalidArgument("ragged_paged_attention has no output '" + std::string(output) + "'");
  }
  const double u = unit_roundoff(DType::kF32);
  const double p_rounding = p.out_dtype == DType::kF32 ? 0.0 : unit_roundoff(p.out_dtype);
  const Tensor& q = inputs.at("queries");
  // The samples of each (token, head) row.
  std::map<int64_t, std::vector<size_t>> rows;
  for (size_t s = 0; s < index.size(); ++s) rows[lse ? index[s] : index[s] / p.D].push_back(s);
  std::vector<double> logit, weight;
  for (const auto& [row, samples] : rows) {
    const int64_t t = row / p.Hq, hq = row % p.Hq, h = hq / p.groups(), s = tokens.seq[t];
    if (s < 0) {  // an invalid token: zeros, lse -inf
      if (lse) {
        for (size_t at : samples) sample.value[at] = -std::numeric_limits<double>::infinity();
      }
      continue;
    }
    const auto [lo, hi] = RpaTokens::key_range(p, s, tokens.pos[t]);
    const int64_t n = hi - lo;
    logit.assign(static_cast<size_t>(n), 0.0);
    double max = -std::numeric_limits<double>::infinity(), min = -max, delta = 0.0;
    for (int64_t j = lo; j < hi; ++j) {
      const int64_t k_at = rpa_cache_at(p, s, j, h, 0);
      double dot = 0.0, abs_dot = 0.0;
      for (int64_t x = 0; x < p.D; ++x) {
        const double term =
            (q.get((t * p.Hq + hq) * p.D + x) / p.q_scale) * (cache.get(k_at + x) / p.k_scale);
        dot += term;
        abs_dot += std::fabs(term);
      }
      double z = p.sm_scale * dot;
      if (p.soft_cap > 0.0) z = p.soft_cap * std::tanh(z / p.soft_cap);
      logit[j - lo] = z;
      delta = std::max(delta, (p.D + 6.0) * std::fabs(p.sm_scale) * abs_dot + 8.0 * std::fabs(z));
      max = std::max(max, z);
      min = std::min(min, z);
    }
    double sum = 0.0;
    weight.assign(static_cast<size_t>(n), 0.0);
    for (int64_t i = 0; i < n; ++i) sum += (weight[i] = std::exp(logit[i] - max));
    const double range = max - min;
    if (lse) {
      const double value = max + std::log(sum);
      for (size_t at : samples) {
        sample.value[at] = value;
        sample.magnitude[at] = delta + 3.0 * n + 2.0 * range + 32.0 + std::fabs(value);
      }
      continue;
    }
    const double bracket =
        std::expm1(2.0 * delta * u) + u * (3.0 * n + 2.0 * range + 32.0) + p_rounding;
    for (size_t at : samples) {
      const int64_t c = index[at] % p.D;
      double value = 0.0, weighted = 0.0;
      for (int64_t j = lo; j < hi; ++j) {
        const double vj = cache.get(rpa_cache_at(p, s, j, h, 1) + c) / p.v_scale;
        value += weight[j - lo] / sum * vj;
        weighted += weight[j - lo] / sum * std::fabs(vj);
      }
      sample.value[at] = value;
      sample.magnitude[at] = weighted * bracket / u;
    }
  }
  return sample;
}

}  // namespace tokamax
