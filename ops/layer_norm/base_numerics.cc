// layer_norm: seeded inputs, the float64 oracle, its error model (the reference is in
// reference.cc).
//
// Dimensions.
//   C      x's extent along `axis`: the normalized extent (the length of scale and offset)
//   O      product of x's extents before `axis`
//   I      product of x's extents after `axis`; I = 1 for the last axis
//   rows   O * I normalizations; row (o, i) reads x[o, c, i] for c in [0, C), stride I
//
// Error model. An implementation computes in f32 (f64 for f64 x) with unit roundoff u, in two
// passes (any summation order): mean m^ = fl(sum x / C), d^ = fl(x - m^), var^ = fl(sum d^2 / C),
// r^ = fl(1 / sqrt(var^ + eps)), y^ = (d^ * r^) * s + b with one rounding per operation, then
// rounds y^ once to x's dtype (unit roundoff u_out); a division by C may be a multiplication by
// a rounded 1 / C (one more rounding). With A = mean_c |x| and r, d, y exact:
//   |m^ - m| <= (C + 1) u A                               (a sum of C terms, one division)
//   var^ / var - 1 <= (C + 4) u  (+ (m^ - m)^2 / var: the mean's error only adds)
//   r^ / r - 1 <= (C / 2 + 4.5) u  + (C + 1)^2 u^2 A^2 r^2 / 2   (eps add, sqrt, division)
//   |y^ - y| <= |s| r [ (C + 1) u A + |d| (C / 2 + 8.5) u + |d| (C + 1)^2 u^2 A^2 r^2 / 2 ]
//               + u |b|
// So with n = C + 8 and magnitude = |s| r (A + |d| (1 + (C + 1) u A^2 r^2 / 2)) + |b| the
// pre-rounding error is <= n u magnitude <= gamma_n magnitude; the output rounding adds
// u_out (|y| + that error), which the factor (1 + u_out) on n absorbs. The error of the
// normalized value thus scales with |x - mean| / sigma = |d| r, and with A r (the mean's error,
// which dominates when |mean| >> sigma). RMSNorm (m = 0 exactly, no A term in the math) keeps
// the A r term as a floor, as it keeps one extra term for f16's subnormal spacing (an absolute
// error of 2^-25 that no relative bound covers). Parameters stored in f64 with f32 statistics
// add one rounding of s, inside the slack of n.
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"
#include "ops/layer_norm/base.h"

namespace tokamax {
namespace {

// The dtype an implementation accumulates statistics in: f32, or f64 for f64 x.
DType stats_dtype(const LayerNormProblem& p) {
  return p.x_dtype == DType::kF64 ? DType::kF64 : DType::kF32;
}

// The `n` of the header comment: roundings of the statistics dtype that the bound allows.
double accumulation_length(const LayerNormProblem& p) {
  return (static_cast<double>(p.C) + 8.0) * (1.0 + unit_roundoff(p.x_dtype)) + 1.0;
}

const Tensor* find_input(const TensorMap& inputs, const char* name) {
  auto it = inputs.find(name);
  return it == inputs.end() ? nullptr : &it->second;
}

}  // namespace

double layer_norm_output_underflow(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return std::ldexp(1.0, -25);
    case DType::kBF16:
      // Not half of bf16's subnormal spacing (2^-134) but its smallest normal: the cpu kernel's
      // vcvtneps2bf16 flushes subnormal results to zero.
      return std::ldexp(1.0, -126);
    case DType::kF32:
      return std::ldexp(1.0, -150);
    default:
      return 0.0;
  }
}

template <>
TensorMap ProblemOp<LayerNormProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  TensorMap inputs;
  // Activations ~ 0.25 + 1.5 N(0, 1): a non-zero mean, so that the mean subtraction matters and
  // RMSNorm differs from layer norm. Scale ~ 1 + N(0, 1/16), offset ~ N(0, 1/100): trained
  // parameters stay near their (1, 0) initialisation.
  inputs.emplace("x", normal_tensor(args.tensor("x"), seed, "x", 1.5, 0.25));
  if (args.has("scale")) {
    inputs.emplace("scale", normal_tensor(args.tensor("scale"), seed, "scale", 0.25, 1.0));
  }
  if (args.has("offset")) {
    inputs.emplace("offset", normal_tensor(args.tensor("offset"), seed, "offset", 0.1));
  }
  return inputs;
}

template <>
double ProblemOp<LayerNormProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  // A sampled output costs its row's statistics (3 passes over C) unless a neighbour shared them.
  return 3.0 * static_cast<double>(std::max<int64_t>(LayerNormProblem::from(args).C, 1));
}

template <>
ErrorModel ProblemOp<LayerNormProblem>::error_model(const BoundArgs& args) const {
  const LayerNormProblem p = LayerNormProblem::from(args);
  ErrorModel model;
  model.accumulation_roundoff = unit_roundoff(stats_dtype(p));
  model.accumulation_length = accumulation_length(p);
  model.output_roundoff = unit_roundoff(p.x_dtype);
  return model;
}

template <>
OracleSample ProblemOp<LayerNormProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                                 std::string_view output,
                                                 std::span<const int64_t> index) const {
  if (output != "out") {
    throw InvalidArgument("layer_norm has no output '" + std::string(output) + "'");
  }
  const LayerNormProblem p = LayerNormProblem::from(args);
  const Tensor& x = inputs.find("x")->second;
  const Tensor* scale = find_input(inputs, "scale");
  const Tensor* offset = find_input(inputs, "offset");
  const ErrorModel model = error_model(args);
  const double u = model.accumulation_roundoff;
  const double n_u = model.accumulation_length * u;
  const double C = static_cast<double>(p.C);

  // Row statistics in f64, computed once per row that a sampled index touches.
  struct Stats {
    double mean, rstd, mean_abs;
  };
  std::unordered_map<int64_t, Stats> stats;
  auto row_stats = [&](int64_t o, int64_t i) -> const Stats& {
    const int64_t row = o * p.I + i;
    auto it = stats.find(row);
    if (it != stats.end()) return it->second;
    const int64_t base = o * p.C * p.I + i;
    double sum = 0.0, sum_abs = 0.0;
    for (int64_t c = 0; c < p.C; ++c) {
      const double v = x.get(base + c * p.I);
      sum += v;
      sum_abs += std::fabs(v);
    }
    const double mean = p.subtract_mean ? sum / C : 0.0;
    double sq = 0.0;
    for (int64_t c = 0; c < p.C; ++c) {
      const double d = x.get(base + c * p.I) - mean;
      sq += d * d;
    }
    const Stats s{mean, 1.0 / std::sqrt(sq / C + p.epsilon), sum_abs / C};
    return stats.emplace(row, s).first->second;
  };

  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.resize(index.size());
  sample.magnitude.resize(index.size());
  for (size_t k = 0; k < index.size(); ++k) {
    const int64_t flat = index[k];
    const int64_t o = flat / (p.C * p.I), c = (flat / p.I) % p.C, i = flat % p.I;
    const Stats& s = row_stats(o, i);
    const double d = x.get(flat) - s.mean;
    const double sc = p.scale_at(scale, c);
    const double b = LayerNormProblem::offset_at(offset, c);
    sample.value[k] = d * s.rstd * sc + b;
    const double A = s.mean_abs, r = s.rstd;
    sample.magnitude[k] =
        std::fabs(sc) * r * (A + std::fabs(d) * (1.0 + (C + 1.0) * u * A * A * r * r / 2.0)) +
        std::fabs(b) + (n_u > 0.0 ? layer_norm_output_underflow(p.x_dtype) / n_u : 0.0);
  }
  return sample;
}

}  // namespace tokamax
