// linear_softmax_cross_entropy_loss_vjp: the float64 oracle of dx and dw (blocked, or the plain
// loop that tests it); the error model (items 1-5) is derived in base_numerics.cc.
//
// Dimensions.
//   B, H, V   as base.h; z, m the logits and their magnitudes (oracle_logits.h)
//   dz, e     dz[b, j] = c_b (p_bj - [j = label_b]) and the bound e_bj on its error
#include "ops/linear_softmax_cross_entropy_loss/oracle.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/common/f64_matrix.h"
#include "ops/framework/errors.h"
#include "ops/linear_softmax_cross_entropy_loss/oracle_logits.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp/base.h"

namespace tokamax {
namespace {

constexpr double kU = 0x1p-24;  // f32 unit roundoff: the accumulation every implementation uses

double gamma_f32(double n) {
  const double nu = n * kU;
  return nu < 0.5 ? nu / (1.0 - nu) : 1.0;
}

// Half the spacing of `dtype`'s subnormals: the absolute part of rounding to it.
double subnormal_half_spacing(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return 0x1p-25;
    case DType::kBF16:
      return 0x1p-134;
    case DType::kF32:
      return 0x1p-150;
    default:
      return 0.0;
  }
}

bool is_16bit(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }

// What dz and its error need: the row weights c_b, labels, the rows' log-sum-exp and its budget
// L_b (item 1), and u_16 of item 3 (0 unless both inputs are 16-bit).
struct Context {
  const LinearSoftmaxCrossEntropyProblem& p;
  const int32_t* label;
  std::vector<double> c;
  std::vector<double> lse, lse_budget;  // per row of the problem (0 for rows not needed)
  double u_dz = 0.0;

  // dz_bj and its error e_bj (items 2-3) from the logit z_bj and its magnitude m_bj.
  void dz(int64_t b, int64_t j, double z, double m, double& value, double& error) const {
    const double onehot = label[b] == j ? 1.0 : 0.0;
    const double prob = std::exp(z - lse[b]);
    const double eps = gamma_f32(static_cast<double>(p.H) + 1.0) * m + lse_budget[b] +
                       kU * (std::fabs(z - lse[b]) + 8.0);
    const double cb = std::fabs(c[b]);
    value = c[b] * (prob - onehot);
    error = cb * (prob * std::expm1(eps) + 3.0 * kU * (prob + onehot));
    error += u_dz * (std::fabs(value) + error);
  }
};

// Each point's sums: the value, the propagated errors sum e |input| and sum (|dz| + e) |input|.
struct Sums {
  std::vector<double> value, budget, terms;
  explicit Sums(size_t S) : value(S, 0.0), budget(S, 0.0), terms(S, 0.0) {}
};

// The oracle's definition: dx rows' logits one row at a time, dw's logits element by element.
void loop_sums(const Context& o, const TensorMap& inputs, bool dx, std::span<const int64_t> index,
               std::span<const int64_t> rows, Sums& out) {
  const LinearSoftmaxCrossEntropyProblem& p = o.p;
  const Tensor& x = inputs.at("x");
  const Tensor& w = inputs.at("w");
  const int64_t H = p.H, V = p.V;
  if (dx) {
    lsce_logits(p, inputs, rows, OracleMethod::kLoop,
                [&](int64_t first, int64_t, int64_t, int64_t, const double* z, const double* m) {
                  const int64_t b = rows[first];
                  for (size_t s = 0; s < index.size(); ++s) {
                    if (index[s] / H != b) continue;
                    const int64_t h = index[s] % H;
                    for (int64_t j = 0; j < V; ++j) {
                      double d = 0.0, e = 0.0;
                      o.dz(b, j, z[j], m[j], d, e);
                      const double wv = w.get(h * V + j);
                      out.value[s] += d * wv;
                      out.budget[s] += e * std::fabs(wv);
                      out.terms[s] += (std::fabs(d) + e) * std::fabs(wv);
                    }
                  }
                });
    return;
  }
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t h = index[s] / V, j = index[s] % V;
    for (int64_t b = 0; b < p.B; ++b) {
      if (o.c[b] == 0.0) continue;
      double z = 0.0, m = 0.0, d = 0.0, e = 0.0;
      for (int64_t k = 0; k < H; ++k) {
        const double t = x.get(b * H + k) * w.get(k * V + j);
        z += t;
        m += std::fabs(t);
      }
      o.dz(b, j, z, m, d, e);
      const double xv = x.get(b * H + h);
      out.value[s] += xv * d;
      out.budget[s] += e * std::fabs(xv);
      out.terms[s] += (std::fabs(d) + e) * std::fabs(xv);
    }
  }
}

// The same sums chunk by chunk of logits (lsce_logits, blocked): dz and e of the chunk, then
// f64_dot_rows of them with w's columns (dx) or of x's columns with them (dw), the chunks'
// partial sums added.
void blocked_sums(const Context& o, const TensorMap& inputs, bool dx,
                  std::span<const int64_t> index, std::span<const int64_t> rows, Sums& out) {
  const LinearSoftmaxCrossEntropyProblem& p = o.p;
  const int64_t H = p.H, V = p.V;
  const size_t S = index.size();
  // dx: the samples of each row (rows are sorted); dw: the samples by column j, and the sampled
  // h (rows of x^T), each once.
  std::vector<size_t> order(S);
  for (size_t s = 0; s < S; ++s) order[s] = s;
  auto key = [&](size_t s) { return dx ? index[s] / H : index[s] % V; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  std::vector<int64_t> hs;
  for (size_t s = 0; s < S && !dx; ++s) hs.push_back(index[s] / V);
  std::sort(hs.begin(), hs.end());
  hs.erase(std::unique(hs.begin(), hs.end()), hs.end());
  std::vector<double> dz, e;
  lsce_logits(
      p, inputs, rows, OracleMethod::kBlocked,
      [&](int64_t first, int64_t count, int64_t j0, int64_t Vc, const double* z, const double* m) {
        dz.resize(static_cast<size_t>(count * Vc));
        e.resize(dz.size());
        // dx: [count, Vc]; dw: transposed, [Vc, count] (a contraction over rows).
        for (int64_t r = 0; r < count; ++r) {
          for (int64_t j = 0; j < Vc; ++j) {
            const int64_t at = dx ? r * Vc + j : j * count + r;
            o.dz(rows[first + r], j0 + j, z[r * Vc + j], m[r * Vc + j], dz[at], e[at]);
          }
        }
        const F64Matrix dz_rows{dz, dx ? count : Vc, dx ? Vc : count};
        const F64Matrix e_rows{e, dz_rows.rows, dz_rows.cols};
        std::vector<DotPoint> points;
        std::vector<size_t> at;
        for (size_t i = 0; i < S; ++i) {
          const size_t s = order[i];
          if (dx) {
            const int64_t local =
                std::lower_bound(rows.begin() + first, rows.begin() + first + count, index[s] / H) -
                rows.begin() - first;
            if (local == count || rows[first + local] != index[s] / H) continue;
            points.push_back({local, index[s] % H});
          } else {
            const int64_t j = index[s] % V;
            if (j < j0 || j >= j0 + Vc) continue;
            points.push_back(
                {std::lower_bound(hs.begin(), hs.end(), index[s] / V) - hs.begin(), j - j0});
          }
          at.push_back(s);
        }
        if (points.empty()) return;
        // dx: w[:, j0 .. j0 + Vc) as H rows; dw: x^T [sampled h, rows of this chunk].
        const F64Matrix other = dx ? to_f64(inputs.at("w"), {j0, V, 1}, H, Vc)
                                   : to_f64(inputs.at("x"), {first * H, 1, H}, 0, count, hs);
        const F64Matrix other_abs = abs_of(other);
        const size_t n = points.size();
        std::vector<double> value(n), magnitude(n), propagated(n);
        const F64Rows a = dx ? dz_rows.rows_view() : other.rows_view();
        const F64Rows b = dx ? other.rows_view() : dz_rows.rows_view();
        f64_dot_rows(a, b, points, value, magnitude);
        f64_dot_rows(dx ? e_rows.rows_view() : other_abs.rows_view(),
                     dx ? other_abs.rows_view() : e_rows.rows_view(), points, propagated, {});
        for (size_t i = 0; i < n; ++i) {
          out.value[at[i]] += value[i];
          out.budget[at[i]] += propagated[i];
          out.terms[at[i]] += magnitude[i] + propagated[i];
        }
      });
}

}  // namespace

OracleSample linear_softmax_cross_entropy_vjp_oracle(const BoundArgs& args, const TensorMap& inputs,
                                                     std::string_view output,
                                                     std::span<const int64_t> index,
                                                     OracleMethod method) {
  if (output != "dx" && output != "dw") {
    throw InvalidArgument("linear_softmax_cross_entropy_loss_vjp has no output '" +
                          std::string(output) + "'");
  }
  const LinearSoftmaxCrossEntropyVjpProblem vp = LinearSoftmaxCrossEntropyVjpProblem::from(args);
  const LinearSoftmaxCrossEntropyProblem& p = vp.fwd;
  const bool dx = output == "dx";
  Context o{p,
            inputs.at("labels").data<int32_t>(),
            lsce_vjp_row_weights(vp, inputs.at("labels"), inputs.at("dloss")),
            std::vector<double>(static_cast<size_t>(p.B), 0.0),
            std::vector<double>(static_cast<size_t>(p.B), 0.0),
            0.0};
  if (is_16bit(p.x_dtype) && is_16bit(p.w_dtype)) {
    o.u_dz = std::max(unit_roundoff(p.x_dtype), unit_roundoff(p.w_dtype));
  }
  // The rows with a gradient (padding and c_b = 0 have none): dx's sampled ones, or every row
  // for dw (a zero dz for the others adds nothing).
  std::vector<int64_t> rows;
  if (dx) {
    for (int64_t i : index) {
      if (o.c[i / p.H] != 0.0) rows.push_back(i / p.H);
    }
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  } else {
    for (int64_t b = 0; b < p.B; ++b) {
      if (o.c[b] != 0.0 || method == OracleMethod::kBlocked) rows.push_back(b);
    }
  }
  const std::vector<LsceRowStats> stats = lsce_row_stats(p, inputs, rows, method);
  for (size_t r = 0; r < rows.size(); ++r) {
    const double lse = stats[r].lse();
    o.lse[rows[r]] = lse;
    o.lse_budget[rows[r]] = gamma_f32(static_cast<double>(p.H) + 1.0) * stats[r].m_max +
                            kU * (3.0 * static_cast<double>(p.V) + 32.0 + 3.0 * std::fabs(lse));
  }
  Sums sums(index.size());
  if (method == OracleMethod::kLoop) {
    loop_sums(o, inputs, dx, index, rows, sums);
  } else {
    blocked_sums(o, inputs, dx, index, rows, sums);
  }
  const DType out_dtype = dx ? p.x_dtype : p.w_dtype;
  const double u_out = unit_roundoff(out_dtype);
  const double out_floor = subnormal_half_spacing(out_dtype);
  const double n = static_cast<double>(dx ? p.V : p.B) + 1.0;
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.assign(index.size(), 0.0);
  sample.magnitude.assign(index.size(), 0.0);
  for (size_t s = 0; s < index.size(); ++s) {
    if (dx && o.c[index[s] / p.H] == 0.0) continue;  // padding or c_b = 0: exactly zero
    double budget = sums.budget[s] + gamma_f32(n) * sums.terms[s];
    budget += u_out * (std::fabs(sums.value[s]) + budget) + out_floor;  // item 5
    sample.value[s] = sums.value[s];
    sample.magnitude[s] = budget / kU;
  }
  return sample;
}

template <>
OracleSample ProblemOp<LinearSoftmaxCrossEntropyVjpProblem>::oracle(
    const BoundArgs& args, const TensorMap& inputs, std::string_view output,
    std::span<const int64_t> index) const {
  return linear_softmax_cross_entropy_vjp_oracle(args, inputs, output, index,
                                                 OracleMethod::kBlocked);
}

}  // namespace tokamax
