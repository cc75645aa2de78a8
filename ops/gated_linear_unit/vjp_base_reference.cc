// gated_linear_unit_vjp: seeded inputs, the float64 oracle of every gradient, its error model,
// the reference.
//
// Dimensions.
//   M, K, N   as vjp_base.h; H [M, 2N] = [dg | dp]
//   g, p      the exact gate and projection of one (row, column); a = act(g), a' = act'(g)
//   Mg, Mp    sum_k |x_k Wg[k, n]| and sum_k |x_k Wp[k, n]|
//   u         the accumulator's unit roundoff (f32; f64 for f64 x); nK = K + 2
//
// Error model. An implementation recomputes g^ and p^ as the forward does, |g^ - g| <= gK Mg and
// |p^ - p| <= gK Mp with gK = gamma_(nK) (the forward's bound, ops/gated_linear_unit/
// base_reference.cc), then forms H^ in the accumulator. With C2 = activation_curvature (|a''|),
// L = activation_lipschitz and c = kActivationEvalUlps (act and act' each evaluated within
// c u (1 + |y| + |act(y)|)):
//   |dg^ - dg| <= |dout| [ |a'| gK Mp + (|p| + gK Mp) (C2 gK Mg + c u (1 + |g| + gK Mg) + j) ]
//                 + 2 u |dg|        (j = 1 for relu where gK Mg >= |g|: its derivative's step)
//   |dp^ - dp| <= |dout| [ L gK Mg + c u (|g| + |a| + (1 + L) gK Mg) ] + u |dp|
// Call these u E[m, j]. Each gradient element is then a contraction of H^ with the weights (dx,
// 2N terms) or with x (dweights, M terms), summed in any order with one rounding per product:
//   |dx^ - dx|   <= u [ sum_j E[m, j] |W[k, j]| + (2N + 1)' sum_j |H W| ]
//   |dW^ - dW|   <= u [ sum_m |x[m, k]| E[m, j] + (M + 1)' sum_m |x H| ]
// with n' = n (1 + 2 n u) (gamma_n / u for n u <= 1/4). The two outputs' term counts differ, so
// accumulation_length is 1 and each point's magnitude is the bracket (times 1.01 for the
// second-order terms: H^'s own error inside the products, |g^| for |g|), as ragged_dot_vjp
// does; the output rounding is ErrorModel::output_roundoff (the coarser of x's and the
// weights' dtypes), and f16's subnormal spacing an absolute floor.
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"
#include "ops/framework/vjp.h"
#include "ops/gated_linear_unit/api.h"
#include "ops/gated_linear_unit/vjp_base.h"

namespace tokamax {
namespace {

DType accumulator(const GluProblem& p) {
  return p.x_dtype == DType::kF64 ? DType::kF64 : DType::kF32;
}

// One row of H in f64 and its error scale E (in units of u).
struct HRow {
  std::vector<double> h, e;
};

HRow h_row(const GluProblem& p, const Tensor& x, const GluWeights& w, const Tensor& dout,
           int64_t row, double u) {
  const int64_t K = p.K, N = p.N;
  const double nK = static_cast<double>(K) + 2.0;
  const double gK = nK * u / (1.0 - nK * u);
  const double L = activation_lipschitz(p.activation);
  const double C2 = activation_curvature(p.activation);
  const double c = kActivationEvalUlps;
  HRow r;
  r.h.assign(static_cast<size_t>(2 * N), 0.0);
  r.e.assign(static_cast<size_t>(2 * N), 0.0);
  std::vector<double> g(static_cast<size_t>(N), 0.0), pr(static_cast<size_t>(N), 0.0),
      Mg(static_cast<size_t>(N), 0.0), Mp(static_cast<size_t>(N), 0.0);
  for (int64_t k = 0; k < K; ++k) {
    const double xk = x.get(row * K + k);
    for (int64_t n = 0; n < N; ++n) {
      const double tg = xk * w.get(0, k, n), tp = xk * w.get(1, k, n);
      g[n] += tg;
      pr[n] += tp;
      Mg[n] += std::fabs(tg);
      Mp[n] += std::fabs(tp);
    }
  }
  for (int64_t n = 0; n < N; ++n) {
    const double d = dout.get(row * N + n);
    const double a = apply_activation<double>(p.activation, g[n]);
    const double da = activation_derivative<double>(p.activation, g[n]);
    const double eg = gK * Mg[n], ep = gK * Mp[n];
    const double step = p.activation == Activation::kRelu && eg >= std::fabs(g[n]) ? 1.0 : 0.0;
    const double dg = d * pr[n] * da, dp = d * a;
    r.h[n] = dg;
    r.h[N + n] = dp;
    r.e[n] = (std::fabs(d) * (std::fabs(da) * ep +
                              (std::fabs(pr[n]) + ep) *
                                  (C2 * eg + c * u * (1.0 + std::fabs(g[n]) + eg) + step)) +
              2.0 * u * std::fabs(dg)) /
             u;
    r.e[N + n] =
        (std::fabs(d) * (L * eg + c * u * (std::fabs(g[n]) + std::fabs(a) + (1.0 + L) * eg)) +
         u * std::fabs(dp)) /
        u;
  }
  return r;
}

double terms_factor(double n, double u) { return n * (1.0 + 2.0 * n * u); }

}  // namespace

TensorMap GatedLinearUnitVjpOp::make_inputs(const BoundArgs& args, uint64_t seed) const {
  // The forward's inputs (x ~ N(0, 1), weights ~ N(0, 1/K)) and a cotangent ~ N(0, 1).
  TensorMap inputs = gated_linear_unit_op().make_inputs(
      primal_args(gated_linear_unit_op(), args, cotangents()), seed);
  inputs.emplace("dout", normal_tensor(args.tensor("dout"), seed, "dout"));
  return inputs;
}

OracleSample GatedLinearUnitVjpOp::oracle(const BoundArgs& args, const TensorMap& inputs,
                                          std::string_view output,
                                          std::span<const int64_t> index) const {
  const GluProblem p = GluProblem::from(args);
  const bool dx_out = output == "dx";
  int weight_part = -1;  // 0: the gate's gradient, 1: the projection's, 2: both (fused)
  if (output == "dweights" && p.fused_weights) weight_part = 2;
  if (output == "dgate_weights" && !p.fused_weights) weight_part = 0;
  if (output == "dproj_weights" && !p.fused_weights) weight_part = 1;
  if (!dx_out && weight_part < 0) {
    throw InvalidArgument("gated_linear_unit_vjp has no output '" + std::string(output) + "'");
  }
  const Tensor& x = inputs.find("x")->second;
  const Tensor& dout = inputs.find("dout")->second;
  const GluWeights w = glu_weights(p, inputs);
  const double u = unit_roundoff(accumulator(p));
  const int64_t M = p.M, K = p.K, N = p.N;
  const double floor_term = subnormal_floor(dx_out ? p.x_dtype : p.w_dtype) / u;
  // Rows of H, computed once each: dx needs its own row, a weight gradient every row.
  std::unordered_map<int64_t, HRow> rows;
  auto row_of = [&](int64_t m) -> const HRow& {
    auto it = rows.find(m);
    if (it == rows.end()) it = rows.emplace(m, h_row(p, x, w, dout, m, u)).first;
    return it->second;
  };
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.assign(index.size(), 0.0);
  sample.magnitude.assign(index.size(), 0.0);
  for (size_t s = 0; s < index.size(); ++s) {
    double value = 0.0, propagated = 0.0, terms = 0.0, n = 0.0;
    if (dx_out) {
      const int64_t m = index[s] / K, k = index[s] % K;
      const HRow& r = row_of(m);
      for (int64_t j = 0; j < 2 * N; ++j) {
        const double wk = w.get(j < N ? 0 : 1, k, j % N);
        value += r.h[j] * wk;
        propagated += r.e[j] * std::fabs(wk);
        terms += std::fabs(r.h[j] * wk);
      }
      n = 2.0 * static_cast<double>(N) + 1.0;
    } else {
      // [K, 2, N] fused: flat (k, part, n); unfused: (k, n) of one part.
      int64_t k = 0, j = 0;
      if (weight_part == 2) {
        k = index[s] / (2 * N);
        j = index[s] % (2 * N);  // part * N + n: the column of H
      } else {
        k = index[s] / N;
        j = weight_part * N + index[s] % N;
      }
      for (int64_t m = 0; m < M; ++m) {
        const HRow& r = row_of(m);
        const double xm = x.get(m * K + k);
        value += xm * r.h[j];
        propagated += std::fabs(xm) * r.e[j];
        terms += std::fabs(xm * r.h[j]);
      }
      n = static_cast<double>(M) + 1.0;
    }
    sample.value[s] = value;
    sample.magnitude[s] = 1.01 * (propagated + terms_factor(n, u) * terms) + floor_term;
  }
  return sample;
}

double GatedLinearUnitVjpOp::oracle_cost_per_output(const BoundArgs& args) const {
  // A weight gradient needs every row of H (2 N K each, shared by the samples of one call).
  const GluProblem p = GluProblem::from(args);
  return 2.0 * static_cast<double>(std::max<int64_t>(p.K, 1)) * static_cast<double>(p.N);
}

ErrorModel GatedLinearUnitVjpOp::error_model(const BoundArgs& args) const {
  const GluProblem p = GluProblem::from(args);
  ErrorModel model;
  model.accumulation_roundoff = unit_roundoff(accumulator(p));
  model.accumulation_length = 1.0;  // each point's term counts are in its magnitude
  model.output_roundoff = std::max(unit_roundoff(p.x_dtype), unit_roundoff(p.w_dtype));
  return model;
}

template <typename Acc>
void gated_linear_unit_vjp_reference(const GluVjpProblem& vp, const Tensor& x,
                                     const GluWeights& w, const Tensor& dout, Tensor& dx,
                                     const GluWeightGrads& dw) {
  const GluProblem& p = vp.fwd;
  const int64_t M = p.M, K = p.K, N = p.N;
  std::vector<Acc> wt(static_cast<size_t>(K * 2 * N));  // [K, 2N] = [Wg | Wp]
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n) {
      wt[k * 2 * N + n] = static_cast<Acc>(w.get(0, k, n));
      wt[k * 2 * N + N + n] = static_cast<Acc>(w.get(1, k, n));
    }
  }
  std::vector<Acc> xr(static_cast<size_t>(K)), h(static_cast<size_t>(2 * N)),
      gp(static_cast<size_t>(2 * N)), dwt(static_cast<size_t>(K * 2 * N), Acc(0));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) xr[k] = static_cast<Acc>(x.get(m * K + k));
    std::fill(gp.begin(), gp.end(), Acc(0));
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t j = 0; j < 2 * N; ++j) gp[j] += xr[k] * wt[k * 2 * N + j];
    }
    for (int64_t n = 0; n < N; ++n) {
      const Acc d = static_cast<Acc>(dout.get(m * N + n));
      h[n] = d * gp[N + n] * activation_derivative<Acc>(p.activation, gp[n]);
      h[N + n] = d * apply_activation<Acc>(p.activation, gp[n]);
    }
    for (int64_t k = 0; k < K; ++k) {
      Acc sum = Acc(0);
      for (int64_t j = 0; j < 2 * N; ++j) sum += h[j] * wt[k * 2 * N + j];
      dx.set(m * K + k, static_cast<double>(sum));
      for (int64_t j = 0; j < 2 * N; ++j) dwt[k * 2 * N + j] += xr[k] * h[j];
    }
  }
  dispatch_float(dw.dtype, [&](auto w_type) {
    using W = decltype(w_type);
    W* gate = static_cast<W*>(dw.gate);
    W* proj = static_cast<W*>(dw.proj);
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t n = 0; n < N; ++n) {
        gate[k * dw.ld + n] = from_double<W>(static_cast<double>(dwt[k * 2 * N + n]));
        proj[k * dw.ld + n] = from_double<W>(static_cast<double>(dwt[k * 2 * N + N + n]));
      }
    }
  });
}

template void gated_linear_unit_vjp_reference<float>(const GluVjpProblem&, const Tensor&,
                                                     const GluWeights&, const Tensor&, Tensor&,
                                                     const GluWeightGrads&);
template void gated_linear_unit_vjp_reference<double>(const GluVjpProblem&, const Tensor&,
                                                      const GluWeights&, const Tensor&, Tensor&,
                                                      const GluWeightGrads&);

namespace {

void run_reference(const GluVjpProblem& problem, const TensorMap& inputs, TensorMap& outputs) {
  const GluWeights w = glu_weights(problem.fwd, inputs);
  const GluWeightGrads dw = glu_weight_grads(problem.fwd, outputs);
  if (accumulator(problem.fwd) == DType::kF64) {
    gated_linear_unit_vjp_reference<double>(problem, inputs.at("x"), w, inputs.at("dout"),
                                            outputs.at("dx"), dw);
  } else {
    gated_linear_unit_vjp_reference<float>(problem, inputs.at("x"), w, inputs.at("dout"),
                                           outputs.at("dx"), dw);
  }
}

}  // namespace

const Implementation& gated_linear_unit_vjp_reference_implementation() {
  static const ReferenceImplementation<GluVjpProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
