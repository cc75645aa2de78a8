// gated_linear_unit: the float64 oracle of `out`: each sampled point's gate and projection
// (blocked or the plain loop), then act(g) p and the error bound's magnitude.
//
// Dimensions.
//   M, K, N   as base.h; S sampled points
//   g, p      the exact gate x.Wg[:, n] and projection x.Wp[:, n] of one output; a = act(g)
//   Mg, Mp    sum_k |x_k Wg[k, n]| and sum_k |x_k Wp[k, n]|: the scale of their rounding errors
#include "ops/gated_linear_unit/oracle.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/gated_linear_unit/api.h"

namespace tokamax {
namespace {

// Rows of x converted to f64 at once: at most 32 Mi doubles (256 MiB).
constexpr int64_t kChunkElements = int64_t{1} << 25;

struct Products {
  std::vector<double> g, proj, Mg, Mp;
  explicit Products(size_t S) : g(S), proj(S), Mg(S), Mp(S) {}
};

// The oracle's definition: two K-term sums per point.
void loop_products(const GluProblem& p, const TensorMap& inputs, std::span<const int64_t> index,
                   Products& out) {
  const Tensor& x = inputs.find("x")->second;
  const GluWeights w = glu_weights(p, inputs);
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t row = index[s] / p.N, col = index[s] % p.N;
    double g = 0.0, proj = 0.0, Mg = 0.0, Mp = 0.0;
    for (int64_t k = 0; k < p.K; ++k) {
      const double xk = x.get(row * p.K + k);
      const double gate_term = xk * w.get(0, k, col);
      const double proj_term = xk * w.get(1, k, col);
      g += gate_term;
      proj += proj_term;
      Mg += std::fabs(gate_term);
      Mp += std::fabs(proj_term);
    }
    out.g[s] = g;
    out.proj[s] = proj;
    out.Mg[s] = Mg;
    out.Mp[s] = Mp;
  }
}

// The same sums by f64_dot_rows: the sampled rows of x (chunk by chunk) against Wg^T and Wp^T.
void blocked_products(const GluProblem& p, const TensorMap& inputs, std::span<const int64_t> index,
                      Products& out) {
  const Tensor& x = inputs.find("x")->second;
  const int64_t K = p.K, N = p.N;
  const F64Matrix wg = glu_weight_f64(p, inputs, 0, true), wp = glu_weight_f64(p, inputs, 1, true);
  std::vector<size_t> samples(index.size());
  for (size_t s = 0; s < index.size(); ++s) samples[s] = s;
  std::stable_sort(samples.begin(), samples.end(),
                   [&](size_t a, size_t b) { return index[a] / N < index[b] / N; });
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(K, 1));
  for (size_t begin = 0; begin < samples.size();) {
    std::vector<int64_t> rows;
    std::vector<DotPoint> points;
    size_t end = begin;
    for (; end < samples.size(); ++end) {
      const int64_t row = index[samples[end]] / N;
      if (rows.empty() || rows.back() != row) {
        if (static_cast<int64_t>(rows.size()) == chunk_rows) break;
        rows.push_back(row);
      }
      points.push_back({static_cast<int64_t>(rows.size()) - 1, index[samples[end]] % N});
    }
    const F64Matrix xs = to_f64(x, {0, K, 1}, 0, K, rows);
    const size_t n = points.size();
    std::vector<double> g(n), Mg(n), proj(n), Mp(n);
    f64_dot_rows(xs.rows_view(), wg.rows_view(), points, g, Mg);
    f64_dot_rows(xs.rows_view(), wp.rows_view(), points, proj, Mp);
    for (size_t i = 0; i < n; ++i) {
      const size_t s = samples[begin + i];
      out.g[s] = g[i];
      out.Mg[s] = Mg[i];
      out.proj[s] = proj[i];
      out.Mp[s] = Mp[i];
    }
    begin = end;
  }
}

}  // namespace

F64Matrix glu_weight_f64(const GluProblem& p, const TensorMap& inputs, int part, bool transposed) {
  // Fused [K, 2, N]: Wp starts N elements in, rows 2N apart; unfused [K, N] each.
  const Tensor& w = p.fused_weights ? inputs.at("weights")
                                    : inputs.at(part == 0 ? "gate_weights" : "proj_weights");
  const int64_t offset = p.fused_weights ? part * p.N : 0;
  const int64_t ld = p.fused_weights ? 2 * p.N : p.N;
  if (transposed) return to_f64(w, {offset, 1, ld}, p.N, p.K);
  return to_f64(w, {offset, ld, 1}, p.K, p.N);
}

// The error bound, per output. An implementation computes g^ and p^ as K-term contractions in
// the accumulator (u = its unit roundoff; products of widened inputs, any summation order):
//   |g^ - g| <= gamma Mg,  |p^ - p| <= gamma Mp,  gamma = n u / (1 - n u),  n = K + 2
// (numerics.h's gamma; the +2 covers rounding x and weights to the accumulator type). Then
//   a^ = act~(g^), with act~ the accumulator's evaluation of act: |act~(y) - act(y)| <=
//        c u (|y| + |act(y)|) (c = kActivationEvalUlps: a few ulps of erf/exp/tanh, and the
//        cancellation in 1 + erf(y) that makes gelu's absolute error scale with |y|), and
//        |act(g^) - act(g)| <= L |g^ - g| (L = activation_lipschitz);
//   out^ = fl(a^ p^), one more rounding of u |a^ p^|, then the output rounding u_out |out|.
// Expanding |a^ p^ - a p| <= |a^ - a| |p^| + |a| |p^ - p| with |p^| <= |p| + gamma Mp:
//   |out^ - a p| <= gamma [L Mg (|p| + gamma Mp) + |a| Mp]
//                 + u [c (|g| + |a| + (1 + L) gamma Mg) + |a| + L gamma Mg] (|p| + gamma Mp)
//                 + u_out |a p|
// The first line is gamma * magnitude; the second becomes magnitude's term divided by n (since
// u <= gamma / n); the third is ErrorModel::output_roundoff. A 1% margin covers the second-order
// terms left out (u_out times the error itself, |g^| - |g| inside act~'s bound), and f16's
// subnormal spacing is added as an absolute floor.
OracleSample gated_linear_unit_oracle(const BoundArgs& args, const TensorMap& inputs,
                                      std::span<const int64_t> index, OracleMethod method) {
  const GluProblem p = GluProblem::from(args);
  const ErrorModel model = gated_linear_unit_op().error_model(args);
  const double n = model.accumulation_length;
  const double n_u = n * model.accumulation_roundoff;
  const double gamma = term_gamma(model);  // the operands' rounding included
  const double L = activation_lipschitz(p.activation);
  const double floor_term = subnormal_floor(p.out_dtype()) / n_u;
  Products products(index.size());
  if (method == OracleMethod::kLoop) {
    loop_products(p, inputs, index, products);
  } else {
    blocked_products(p, inputs, index, products);
  }
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.resize(index.size());
  sample.magnitude.resize(index.size());
  for (size_t s = 0; s < index.size(); ++s) {
    const double g = products.g[s], proj = products.proj[s];
    const double a = apply_activation<double>(p.activation, g);
    sample.value[s] = a * proj;
    sample.magnitude[s] =
        gated_product_magnitude(g, a, proj, products.Mg[s], products.Mp[s], L, gamma, n) +
        floor_term;
  }
  return sample;
}

template <>
OracleSample ProblemOp<GluProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                           std::string_view output,
                                           std::span<const int64_t> index) const {
  if (output != "out") {
    throw InvalidArgument("gated_linear_unit has no output '" + std::string(output) + "'");
  }
  return gated_linear_unit_oracle(args, inputs, index, OracleMethod::kBlocked);
}

}  // namespace tokamax
