// splash_attention: the float64 oracle of out, max_logits and logsumexp.
//
// Dimensions: as base.h.
//
// Error model, per (head, row) of n weighted keys (units of u, the f32 roundoff), as
// dot_product_attention's: each visible logit, capped, is off by at most Delta = (D + 6) sum
// |q k| + 8 |z| (the D-term dot product and the cap's tanh); the weights then move by a factor
// within exp(+-2 Delta u); the exps, the running rescales and the n-term sums add u (3n + 2R +
// 32) (R the range of the row's logits and sink); bf16 inputs may have P rounded to bf16 before
// P V (the native engines): + u_bf16. All relative to W = sum_j p_j |v_j|. logsumexp: Delta +
// 3n + 2R + 32 + |lse| absolutely; max_logits: Delta + |m|. A row that sees no key weighs every
// key alike at mask_value (exact logits): only the sums' rounding.
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "ops/framework/errors.h"
#include "ops/splash_attention/base.h"
#include "ops/splash_attention/mask.h"

namespace tokamax {

template <>
OracleSample ProblemOp<SplashAttentionProblem>::oracle(const BoundArgs& args,
                                                       const TensorMap& inputs,
                                                       std::string_view output,
                                                       std::span<const int64_t> index) const {
  const SplashAttentionProblem p = SplashAttentionProblem::from(args);
  const bool is_out = output == "out";
  const bool is_max = output == "max_logits" && p.return_residuals;
  const bool is_lse = output == "logsumexp" && p.return_residuals;
  if (!is_out && !is_max && !is_lse) {
    throw InvalidArgument("splash_attention has no output '" + std::string(output) + "'");
  }
  const SplashMask mask = SplashMask::of(p.mask, p.T, p.t, inputs);
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.assign(index.size(), 0.0);
  sample.magnitude.assign(index.size(), 0.0);
  const double u = unit_roundoff(DType::kF32);
  const double p_rounding = p.dtype == DType::kBF16 ? unit_roundoff(DType::kBF16) : 0.0;
  const Tensor& q = inputs.at("q");
  const Tensor& k = inputs.at("k");
  const Tensor& v = inputs.at("v");
  // The samples of each (head, row).
  std::map<int64_t, std::vector<size_t>> rows;
  for (size_t s = 0; s < index.size(); ++s) rows[is_out ? index[s] / p.d : index[s]].push_back(s);
  std::vector<double> logit(static_cast<size_t>(p.t)), weight(static_cast<size_t>(p.t));
  for (const auto& [row, samples] : rows) {
    const int64_t hq = row / p.T, r = row % p.T, h = hq / p.groups();
    const double sink = p.has_sinks ? inputs.at("sinks").get(hq) : -INFINITY;
    double max = sink, min = p.has_sinks ? sink : INFINITY, delta = 0.0;
    int64_t n = 0;
    const bool none = mask.count(r) == 0;
    for (int64_t j = 0; j < p.t; ++j) {
      if (!mask.visible(r, j)) {
        logit[j] = p.mask_value;
        if (none) max = std::max(max, p.mask_value);
        continue;
      }
      double dot = 0.0, abs_dot = 0.0;
      for (int64_t x = 0; x < p.D; ++x) {
        const double term = q.get((hq * p.T + r) * p.D + x) * k.get((h * p.t + j) * p.D + x);
        dot += term;
        abs_dot += std::fabs(term);
      }
      double z = dot;
      if (p.soft_cap > 0.0) z = p.soft_cap * std::tanh(z / p.soft_cap);
      logit[j] = z;
      delta = std::max(delta, (p.D + 6.0) * abs_dot + 8.0 * std::fabs(z));
      max = std::max(max, z);
      min = std::min(min, z);
      ++n;
    }
    if (none) n = p.t, min = std::min(min, p.mask_value);
    double sum = p.has_sinks ? std::exp(sink - max) : 0.0;
    for (int64_t j = 0; j < p.t; ++j) sum += (weight[j] = std::exp(logit[j] - max));
    const double range = none && !p.has_sinks ? 0.0 : max - min;
    const double lse = max + std::log(sum);
    if (!is_out) {
      for (size_t at : samples) {
        sample.value[at] = is_max ? max : lse;
        sample.magnitude[at] =
            is_max ? delta + std::fabs(max) : delta + 3.0 * n + 2.0 * range + 32.0 + std::fabs(lse);
      }
      continue;
    }
    const double bracket =
        std::expm1(2.0 * delta * u) + u * (3.0 * n + 2.0 * range + 32.0) + p_rounding;
    for (size_t at : samples) {
      const int64_t c = index[at] % p.d;
      double value = 0.0, weighted = 0.0;
      for (int64_t j = 0; j < p.t; ++j) {
        if (weight[j] == 0.0) continue;
        const double vj = v.get((h * p.t + j) * p.d + c);
        value += weight[j] / sum * vj;
        weighted += weight[j] / sum * std::fabs(vj);
      }
      sample.value[at] = value;
      sample.magnitude[at] = weighted * bracket / u;
    }
  }
  return sample;
}

}  // namespace tokamax
