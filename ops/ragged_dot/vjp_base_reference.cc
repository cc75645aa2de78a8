// ragged_dot_vjp: seeded inputs, the error model of the float64 oracle of dlhs and drhs
// (vjp_oracle.cc), the reference.
//
// Dimensions: as vjp_base.h (G, M, K, N; rows_g the rows of group g).
//
// Error model. Each gradient element is a contraction: dlhs[m, k] sums N terms dout[m, n]
// rhs[g, k, n], drhs[g, k, n] sums rows_g terms lhs[m, k] dout[m, n]. An implementation forms
// each product with one rounding (exact for 16-bit inputs) and sums in any order in the
// accumulator (u: f32, f64 for an f64 dout), so |error| <= gamma_(n+1) sum |terms|, n the
// element's own term count, then rounds once to its output dtype. The two outputs' term counts
// differ (N and rows_g, each group its own), while the framework's ErrorModel has one
// accumulation_length per op: so accumulation_length is 1 and each sampled point's magnitude
// carries its own factor, (n + 1) (1 + 2 (n + 1) u) sum |terms| (the last factor bounds
// gamma_(n+1) / ((n + 1) u) for (n + 1) u <= 1/4). The output rounding takes the coarser of
// the two output dtypes.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"
#include "ops/framework/vjp.h"
#include "ops/ragged_dot/api.h"
#include "ops/ragged_dot/vjp_base.h"
#include "ops/ragged_dot/vjp_precision.h"

namespace tokamax {
namespace {

DType accumulator(const RaggedDotVjpProblem& p) {
  return p.dout_dtype == DType::kF64 ? DType::kF64 : DType::kF32;
}

}  // namespace

TensorMap RaggedDotVjpOp::make_inputs(const BoundArgs& args, uint64_t seed) const {
  // The forward's inputs (activations N(0, 1), weights N(0, 1/K)) and a cotangent ~ N(0, 1): the
  // scale of a loss gradient normalized per token.
  TensorMap inputs =
      ragged_dot_op().make_inputs(primal_args(ragged_dot_op(), args, cotangents()), seed);
  inputs.emplace("dout", normal_tensor(args.tensor("dout"), seed, "dout"));
  return inputs;
}

double RaggedDotVjpOp::oracle_cost_per_output(const BoundArgs& args) const {
  const RaggedDotVjpProblem p = RaggedDotVjpProblem::from(args);
  return static_cast<double>(std::max<int64_t>({p.fwd.N, p.max_group_rows(), 1}));
}

ErrorModel RaggedDotVjpOp::error_model(const BoundArgs& args) const {
  const RaggedDotVjpProblem p = RaggedDotVjpProblem::from(args);
  ErrorModel model;
  model.accumulation_roundoff = unit_roundoff(accumulator(p));
  model.accumulation_length = 1.0;  // each point's term count is in its magnitude
  model.output_roundoff = std::max(unit_roundoff(p.dlhs_dtype), unit_roundoff(p.drhs_dtype));
  return model;
}

template <typename Acc>
void ragged_dot_vjp_reference(const RaggedDotVjpProblem& vp, const Tensor& lhs, const Tensor& rhs,
                              const Tensor& dout, Tensor& dlhs, Tensor& drhs) {
  const RaggedDotProblem& p = vp.fwd;
  const int64_t K = p.K, N = p.N;
  dlhs.fill_zero();
  drhs.fill_zero();
  std::vector<Acc> w(static_cast<size_t>(K * N)), acc(static_cast<size_t>(K * N));
  std::vector<Acc> a(static_cast<size_t>(K)), d(static_cast<size_t>(N));
  for (int64_t g = 0; g < p.G; ++g) {
    if (p.group_sizes[g] == 0) continue;  // drhs[g] stays zero
    for (int64_t i = 0; i < K * N; ++i) w[i] = static_cast<Acc>(rhs.get(g * K * N + i));
    std::fill(acc.begin(), acc.end(), Acc(0));
    for (int64_t row = p.group_starts[g]; row < p.group_starts[g + 1]; ++row) {
      for (int64_t k = 0; k < K; ++k) a[k] = static_cast<Acc>(lhs.get(row * K + k));
      for (int64_t n = 0; n < N; ++n) d[n] = static_cast<Acc>(dout.get(row * N + n));
      // dlhs[row, k] = sum_n dout[row, n] rhs[g, k, n]: rhs's row k is contiguous.
      for (int64_t k = 0; k < K; ++k) {
        Acc sum = Acc(0);
        for (int64_t n = 0; n < N; ++n) sum += d[n] * w[k * N + n];
        dlhs.set(row * K + k, static_cast<double>(sum));
      }
      // drhs[g] += lhs[row]^T dout[row]: one rank-1 update per row, rows in order.
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t n = 0; n < N; ++n) acc[k * N + n] += a[k] * d[n];
      }
    }
    for (int64_t i = 0; i < K * N; ++i) drhs.set(g * K * N + i, static_cast<double>(acc[i]));
  }
}

template void ragged_dot_vjp_reference<float>(const RaggedDotVjpProblem&, const Tensor&,
                                              const Tensor&, const Tensor&, Tensor&, Tensor&);
template void ragged_dot_vjp_reference<double>(const RaggedDotVjpProblem&, const Tensor&,
                                               const Tensor&, const Tensor&, Tensor&, Tensor&);

namespace {

void run_plain(const RaggedDotVjpProblem& problem, const TensorMap& inputs, TensorMap& outputs) {
  const Tensor& lhs = inputs.at("lhs");
  const Tensor& rhs = inputs.at("rhs");
  const Tensor& dout = inputs.at("dout");
  // f32 accumulation, as the forward's reference; f64 for an f64 cotangent.
  if (accumulator(problem) == DType::kF64) {
    ragged_dot_vjp_reference<double>(problem, lhs, rhs, dout, outputs.at("dlhs"),
                                     outputs.at("drhs"));
  } else {
    ragged_dot_vjp_reference<float>(problem, lhs, rhs, dout, outputs.at("dlhs"),
                                    outputs.at("drhs"));
  }
}

// A precision preset as its passes on pieces (vjp_precision.h).
void run_reference(const RaggedDotVjpProblem& problem, const TensorMap& inputs,
                   TensorMap& outputs) {
  run_ragged_dot_vjp(problem, inputs, outputs, run_plain);
}

}  // namespace

const Implementation& ragged_dot_vjp_reference_implementation() {
  static const ReferenceImplementation<RaggedDotVjpProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
