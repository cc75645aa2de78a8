// dot_product_attention_vjp: a head's rows of the exact backward from its q . k and dout . v
// dot products (attention_key_dots, blocked or the plain loop); the error terms follow the model
// in base_numerics.cc.
//
// Dimensions: as base.h (B, T, t, H, h, D, d; b, hq, r, j, c); R the rows of one call.
#include "ops/dot_product_attention/vjp/oracle_rows.h"

#include <algorithm>
#include <cmath>

namespace tokamax {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

std::vector<VjpRow> attention_vjp_rows(const AttentionProblem& p, const TensorMap& inputs,
                                       const AttentionMasks& masks, int64_t b, int64_t hq,
                                       std::span<const int64_t> rows, const VjpRowOptions& options,
                                       F64Matrix* out) {
  const int64_t i = hq / p.groups(), R = static_cast<int64_t>(rows.size()), t = p.t;
  const double u = options.u, cap = p.logits_soft_cap;
  const Tensor& v = inputs.at("v");
  const KeyDots s =
      attention_key_dots(p, inputs.at("q"), inputs.at("k"), p.D, b, hq, rows, options.method);
  std::vector<VjpRow> result(static_cast<size_t>(R));
  std::vector<double> gate(static_cast<size_t>(R * t), 1.0), delta(static_cast<size_t>(R), 0.0);
  std::vector<double> logit(static_cast<size_t>(t));
  for (int64_t n = 0; n < R; ++n) {
    const int64_t r = rows[n];
    VjpRow& row = result[n];
    row.p.assign(static_cast<size_t>(t), 0.0);
    row.ds.assign(static_cast<size_t>(t), 0.0);
    row.es.assign(static_cast<size_t>(t), 0.0);
    std::fill(logit.begin(), logit.end(), -kInf);
    const auto [lo, hi] = p.key_range(b, r);
    double max = -kInf, min = kInf;
    for (int64_t j = lo; j < hi; ++j) {
      if (!masks.keep(p, b, hq, r, j)) continue;
      const double bias = masks.bias_at_key(p, b, hq, r, j);
      const double z = p.logits_scale * s.dot[n * t + j] + bias;
      double logit_j = z;
      if (cap > 0.0) {
        const double th = std::tanh(z / cap);
        logit_j = cap * th;
        gate[n * t + j] = 1.0 - th * th;
      }
      logit[j] = logit_j;
      delta[n] = std::max(delta[n], (p.D + 4.0) * std::fabs(p.logits_scale) * s.abs[n * t + j] +
                                        4.0 * std::fabs(bias) + 8.0 * std::fabs(logit_j));
      max = std::max(max, logit_j);
      min = std::min(min, logit_j);
    }
    if (max == -kInf) continue;
    row.empty = false;
    double sum = 0.0;
    for (int64_t j = lo; j < hi; ++j) {
      if (logit[j] == -kInf) continue;
      row.p[j] = std::exp(logit[j] - max);
      sum += row.p[j];
    }
    for (int64_t j = lo; j < hi; ++j) row.p[j] /= sum;
    row.lse = max + std::log(sum);
    row.eP = std::expm1(2.0 * delta[n] * u) / u + 3.0 * t + 2.0 * (max - min) + 32.0 +
             std::fabs(row.lse) + 4.0;
  }
  // out = P v: asked for, or its rounding enters Dr.
  F64Matrix pv;
  const bool need_out = out != nullptr || (options.with_cotangent && options.out_rounding > 0.0);
  if (need_out) {
    const F64Matrix vt = attention_key_columns(p, v, p.d, b, i);  // [d, t]
    pv = F64Matrix{std::vector<double>(static_cast<size_t>(R * p.d), 0.0), R, p.d};
    if (options.method == OracleMethod::kLoop) {
      for (int64_t n = 0; n < R; ++n) {
        for (int64_t j = 0; j < t; ++j) {
          if (result[n].p[j] == 0.0) continue;
          for (int64_t c = 0; c < p.d; ++c) pv.row(n)[c] += result[n].p[j] * vt.row(c)[j];
        }
      }
    } else {
      F64Matrix weights{std::vector<double>(static_cast<size_t>(R * t)), R, t};
      for (int64_t n = 0; n < R; ++n)
        std::copy(result[n].p.begin(), result[n].p.end(), weights.row(n));
      f64_dot_rows_all(weights.rows_view(), vt.rows_view(), pv.data.data(), nullptr, p.d);
    }
    if (out != nullptr) *out = pv;
  }
  if (!options.with_cotangent) return result;
  // dP_j = dout . v_j and A_j = sum_c |dout_c v_jc|, then Dr = sum_j P_j dP_j and M_D.
  const Tensor& dout = inputs.at("dout");
  const KeyDots dp = attention_key_dots(p, dout, v, p.d, b, hq, rows, options.method);
  // bf16 inputs: out may be recomputed with P rounded to bf16 (native_all), u_bf16 per term.
  const double p_rounding = p.dtype == DType::kBF16 ? unit_roundoff(DType::kBF16) / u : 0.0;
  for (int64_t n = 0; n < R; ++n) {
    VjpRow& row = result[n];
    if (row.empty) continue;
    const double* dP = dp.dot.data() + n * t;
    const double* A = dp.abs.data() + n * t;
    double Dr = 0.0, MD = 0.0;
    for (int64_t j = 0; j < t; ++j) {
      if (row.p[j] == 0.0) continue;
      Dr += row.p[j] * dP[j];
      MD += row.p[j] * A[j];
    }
    double ED = MD * (row.eP + t + p.d + 4.0 + p_rounding);
    if (options.out_rounding > 0.0) {
      // Dr from the rounded out: each out_c off by u_out |out_c| more.
      const int64_t dout_at = ((b * p.T + rows[n]) * p.H + hq) * p.d;
      double dout_out = 0.0;
      for (int64_t c = 0; c < p.d; ++c) dout_out += std::fabs(dout.get(dout_at + c) * pv.row(n)[c]);
      ED += options.out_rounding * dout_out;
    }
    const double kCap = cap > 0.0 ? delta[n] / cap + 4.0 : 0.0;
    for (int64_t j = 0; j < t; ++j) {
      if (row.p[j] == 0.0) continue;
      row.ds[j] = row.p[j] * (dP[j] - Dr) * gate[n * t + j];
      row.es[j] =
          row.p[j] * ((row.eP + 4.0 + kCap) * std::fabs(dP[j] - Dr) + (p.d + 1.0) * A[j] + ED);
    }
  }
  return result;
}

}  // namespace tokamax
