// layer_norm_vjp: seeded inputs, the float64 oracle and its error model (the reference is in
// reference.cc).
//
// Dimensions.
//   C      x's extent along `axis`: the normalized extent (the length of scale and offset)
//   O      product of x's extents before `axis`
//   I      product of x's extents after `axis`; I = 1 for the last axis
//   R      rows = O * I normalizations; row (o, i) reads x[o, c, i] for c in [0, C), stride I
//
// Error model. An implementation computes in f32 (f64 for f64 x) with unit roundoff u, any
// summation order, and rounds each gradient once to its dtype (unit roundoff u_out: x's dtype for
// dx, the parameter's for dscale / doffset). Per row, with r = rstd, A = mean_c |x|, s the
// effective scale, g = dout * s, gbar = mean_c g, h = mean_c (g * xhat), B = g - gbar - xhat * h
// (so dx = r * B) and q = 1 + (C + 1) u A^2 r^2 / 2 (the forward's second-order factor), all exact:
//   xhat^ - xhat   <= (C + 8) u (r A + |xhat| q)    (the forward's bound of (x - m^) r^ with
//                                                    s = 1, b = 0: C/2 + 8.5 and C + 1 <= C + 8)
//   r^ / r - 1     <= (C + 8) u q                   (the forward's C/2 + 4.5, rounded up)
//   gbar^ - gbar   <= (C + 3) u mean|g|             (g rounded once, C terms, the division)
//   h^ - h         <= (C + 4) u mean|g xhat| + (C + 8) u mean(|g| (r A + |xhat| q))
// and B^ from g^ - gbar^ - xhat^ h^ with three more roundings, dx^ = r^ B^ with one. Collecting
// (each coefficient at most C + 8; the products of two errors in the factor 1 + 2 (C + 8) u):
//   |dx^ - dx| <= (C + 8) u r [ |g| + mean|g| + |h| (r A + |xhat| q)
//                               + |xhat| (mean|g xhat| + mean(|g| (r A + |xhat| q))) + q |B| ]
// (RMSNorm: no mean|g| term, no gbar). dscale = sum over the R rows of dout * xhat: each term
// carries its xhat's error and one rounding, and a sum of R terms in any order (per-thread
// partial sums, then a sum of those) adds at most (R - 1) u sum |terms|:
//   |dscale^ - dscale| <= u [ (R + 1) sum |dout xhat| + (C + 8) sum |dout| (r A + |xhat| q) ]
// and doffset = sum of R exact terms: <= R u sum |dout|. Each output's rounding adds
// u_out (|value| + error). The framework's ErrorModel holds one accumulation length and one
// output roundoff per op, while these outputs differ in both (C for dx, R for dscale and
// doffset; x's dtype against the parameters'), so the model is accumulation_length = 1,
// output_roundoff = 0, and each sampled point's magnitude is its whole bound over u:
//   magnitude = (1 + u_out)(1 + 2 n u) n [sum above] + (u_out / u) |value| + floor / u
// with n the output's term count and `floor` the output dtype's subnormal spacing
// (layer_norm_output_underflow: an absolute error that no relative bound covers). Parameters stored
// in f64 with f32 arithmetic add one rounding of s, inside the slack of C + 8.
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/layer_norm/api.h"
#include "ops/layer_norm/vjp/base.h"

namespace tokamax {
namespace {

// The dtype an implementation accumulates in: f32, or f64 for f64 x.
DType acc_dtype(const LayerNormProblem& p) {
  return p.x_dtype == DType::kF64 ? DType::kF64 : DType::kF32;
}

// f64 statistics of one row and what the error model needs of it.
struct RowStats {
  double mean = 0.0, rstd = 0.0;
  double rA = 0.0;  // rstd * mean_c |x|
  double q = 1.0;   // 1 + (C + 1) u A^2 r^2 / 2
};

// The oracle's view of one problem: f64 reads of the inputs, per-row statistics on demand.
class Oracle {
 public:
  Oracle(const LayerNormVjpProblem& p, const TensorMap& inputs, double u)
      : p_(p),
        x_(inputs.at("x")),
        dout_(inputs.at("dout")),
        scale_(find_tensor(inputs, "scale")),
        u_(u) {
    s_.resize(static_cast<size_t>(p.C));
    for (int64_t c = 0; c < p.C; ++c) {
      s_[c] = p.scale_at(scale_, c);
    }
  }

  int64_t base(int64_t row) const { return (row / p_.I) * p_.C * p_.I + row % p_.I; }
  double x(int64_t row, int64_t c) const { return x_.get(base(row) + c * p_.I); }
  double dout(int64_t row, int64_t c) const { return dout_.get(base(row) + c * p_.I); }
  double s(int64_t c) const { return s_[c]; }

  RowStats stats(int64_t row) const {
    const double C = static_cast<double>(p_.C);
    double sum = 0.0, sum_abs = 0.0;
    for (int64_t c = 0; c < p_.C; ++c) {
      sum += x(row, c);
      sum_abs += std::fabs(x(row, c));
    }
    RowStats st;
    st.mean = p_.subtract_mean ? sum / C : 0.0;
    double sq = 0.0;
    for (int64_t c = 0; c < p_.C; ++c) sq += (x(row, c) - st.mean) * (x(row, c) - st.mean);
    st.rstd = 1.0 / std::sqrt(sq / C + p_.epsilon);
    st.rA = st.rstd * sum_abs / C;
    st.q = 1.0 + (C + 1.0) * u_ * st.rA * st.rA / 2.0;
    return st;
  }
  double xhat(const RowStats& st, int64_t row, int64_t c) const {
    return (x(row, c) - st.mean) * st.rstd;
  }

 private:
  const LayerNormVjpProblem& p_;
  const Tensor& x_;
  const Tensor& dout_;
  const Tensor* scale_;
  double u_;
  std::vector<double> s_;
};

// A row's reductions for dx: gbar, h and the sums of absolute values of the error model.
struct RowSums {
  RowStats st;
  double gbar = 0.0, h = 0.0;
  double mean_abs_g = 0.0, mean_abs_gx = 0.0, mean_abs_ge = 0.0;
};

}  // namespace

template <>
TensorMap ProblemOp<LayerNormVjpProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  // The forward's inputs (x with a non-zero mean, parameters near (1, 0)) and dout ~ N(0, 1):
  // cotangents of a loss have no preferred sign or offset.
  TensorMap inputs = layer_norm_op().make_inputs(args, seed);
  inputs.emplace("dout", normal_tensor(args.tensor("dout"), seed, "dout"));
  return inputs;
}

template <>
double ProblemOp<LayerNormVjpProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  // A sampled dx costs its row's statistics and sums (5 passes over C) unless a neighbour shared
  // them; dscale and doffset (C outputs) cost a pass over everything, once per output.
  return 5.0 * static_cast<double>(std::max<int64_t>(LayerNormProblem::from(args).C, 1));
}

template <>
ErrorModel ProblemOp<LayerNormVjpProblem>::error_model(const BoundArgs& args) const {
  // Term counts and output roundings differ per output, so they live in the oracle's magnitudes
  // (header comment): the bound is u / (1 - u) * magnitude.
  ErrorModel model;
  model.accumulation_roundoff = unit_roundoff(acc_dtype(LayerNormProblem::from(args)));
  model.accumulation_length = 1.0;
  model.output_roundoff = 0.0;
  return model;
}

template <>
OracleSample ProblemOp<LayerNormVjpProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                                    std::string_view output,
                                                    std::span<const int64_t> index) const {
  const LayerNormVjpProblem p = LayerNormVjpProblem::from(args);
  if (output != "dx" && !(output == "dscale" && p.has_scale) &&
      !(output == "doffset" && p.has_offset)) {
    throw InvalidArgument("layer_norm_vjp has no output '" + std::string(output) + "' for " +
                          args.key());
  }
  const double u = error_model(args).accumulation_roundoff;
  const Oracle oracle(p, inputs, u);
  const double C = static_cast<double>(p.C), R = static_cast<double>(p.rows());

  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.resize(index.size());
  sample.magnitude.resize(index.size());

  if (output == "dx") {
    const double u_out = unit_roundoff(p.x_dtype);
    const double n = C + 8.0;
    const double factor = (1.0 + u_out) * (1.0 + 2.0 * n * u) * n;
    const double floor = layer_norm_output_underflow(p.x_dtype) / u;
    std::unordered_map<int64_t, RowSums> rows;
    auto row_sums = [&](int64_t row) -> const RowSums& {
      auto it = rows.find(row);
      if (it != rows.end()) return it->second;
      RowSums rs;
      rs.st = oracle.stats(row);
      for (int64_t c = 0; c < p.C; ++c) {
        const double g = oracle.dout(row, c) * oracle.s(c);
        const double xh = oracle.xhat(rs.st, row, c);
        rs.gbar += g;
        rs.h += g * xh;
        rs.mean_abs_g += std::fabs(g);
        rs.mean_abs_gx += std::fabs(g * xh);
        rs.mean_abs_ge += std::fabs(g) * (rs.st.rA + std::fabs(xh) * rs.st.q);
      }
      rs.gbar = p.subtract_mean ? rs.gbar / C : 0.0;
      rs.h /= C;
      rs.mean_abs_g /= C;
      rs.mean_abs_gx /= C;
      rs.mean_abs_ge /= C;
      return rows.emplace(row, rs).first->second;
    };
    for (size_t k = 0; k < index.size(); ++k) {
      const int64_t flat = index[k];
      const int64_t o = flat / (p.C * p.I), c = (flat / p.I) % p.C, i = flat % p.I;
      const int64_t row = o * p.I + i;
      const RowSums& rs = row_sums(row);
      const RowStats& st = rs.st;
      const double g = oracle.dout(row, c) * oracle.s(c);
      const double xh = oracle.xhat(st, row, c);
      const double B = g - rs.gbar - xh * rs.h;
      sample.value[k] = st.rstd * B;
      const double terms = std::fabs(g) + (p.subtract_mean ? rs.mean_abs_g : 0.0) +
                           std::fabs(rs.h) * (st.rA + std::fabs(xh) * st.q) +
                           std::fabs(xh) * (rs.mean_abs_gx + rs.mean_abs_ge) + st.q * std::fabs(B);
      sample.magnitude[k] =
          factor * st.rstd * terms + (u_out / u) * std::fabs(sample.value[k]) + floor;
    }
    return sample;
  }

  // dscale / doffset: sums over every row, so every row's statistics (once for all samples).
  const bool is_scale = output == "dscale";
  const DType dtype = is_scale ? p.scale_dtype : p.offset_dtype;
  const double u_out = unit_roundoff(dtype);
  const double floor = layer_norm_output_underflow(dtype) / u;
  std::vector<RowStats> stats;
  if (is_scale) {
    stats.resize(static_cast<size_t>(p.rows()));
    for (int64_t row = 0; row < p.rows(); ++row) stats[row] = oracle.stats(row);
  }
  for (size_t k = 0; k < index.size(); ++k) {
    const int64_t c = index[k];
    double value = 0.0, sum_abs = 0.0, sum_err = 0.0;
    for (int64_t row = 0; row < p.rows(); ++row) {
      const double dy = oracle.dout(row, c);
      if (is_scale) {
        const double xh = oracle.xhat(stats[row], row, c);
        value += dy * xh;
        sum_abs += std::fabs(dy * xh);
        sum_err += std::fabs(dy) * (stats[row].rA + std::fabs(xh) * stats[row].q);
      } else {
        value += dy;
        sum_abs += std::fabs(dy);
      }
    }
    const double n = is_scale ? R + C + 8.0 : R;
    const double terms = is_scale ? (R + 1.0) * sum_abs + (C + 8.0) * sum_err : R * sum_abs;
    sample.value[k] = value;
    sample.magnitude[k] =
        (1.0 + u_out) * (1.0 + 2.0 * n * u) * terms + (u_out / u) * std::fabs(value) + floor;
  }
  return sample;
}

}  // namespace tokamax
