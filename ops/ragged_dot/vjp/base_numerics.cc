// ragged_dot_vjp: seeded inputs, the error model of the float64 oracle of dlhs and drhs
// (oracle.cc; the reference is in reference.cc).
//
// Dimensions: as base.h (G, M, K, N; rows_g the rows of group g).
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
#include "ops/ragged_dot/vjp/base.h"
#include "ops/ragged_dot/vjp/precision.h"

namespace tokamax {
namespace {

DType accumulator(const RaggedDotVjpProblem& p) {
  return p.dout_dtype == DType::kF64 ? DType::kF64 : DType::kF32;
}

}  // namespace

template <>
TensorMap ProblemOp<RaggedDotVjpProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  // The forward's inputs (activations N(0, 1), weights N(0, 1/K)) and a cotangent ~ N(0, 1): the
  // scale of a loss gradient normalized per token.
  TensorMap inputs =
      ragged_dot_op().make_inputs(primal_args(ragged_dot_op(), args, cotangents()), seed);
  inputs.emplace("dout", normal_tensor(args.tensor("dout"), seed, "dout"));
  return inputs;
}

template <>
double ProblemOp<RaggedDotVjpProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  const RaggedDotVjpProblem p = RaggedDotVjpProblem::from(args);
  return static_cast<double>(std::max<int64_t>({p.fwd.N, p.max_group_rows(), 1}));
}

template <>
ErrorModel ProblemOp<RaggedDotVjpProblem>::error_model(const BoundArgs& args) const {
  const RaggedDotVjpProblem p = RaggedDotVjpProblem::from(args);
  ErrorModel model;
  model.accumulation_roundoff = unit_roundoff(accumulator(p));
  model.accumulation_length = 1.0;  // each point's term count is in its magnitude
  model.output_roundoff = std::max(unit_roundoff(p.dlhs_dtype), unit_roundoff(p.drhs_dtype));
  return model;
}

}  // namespace tokamax
