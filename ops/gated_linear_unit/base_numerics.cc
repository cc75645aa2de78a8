// gated_linear_unit: seeded inputs, the oracle's cost and error model (the float64 oracle itself
// is in oracle.cc, the reference in reference.cc).
//
// Dimensions.
//   M      rows of x, *B flattened
//   K      contraction extent
//   N      output features
//   g, p   the exact gate x.Wg[:, n] and projection x.Wp[:, n] of one output; a = act(g)
//   Mg, Mp sum_k |x_k Wg[k, n]| and sum_k |x_k Wp[k, n]|: the scale of their rounding errors
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"
#include "ops/gated_linear_unit/base.h"

namespace tokamax {
namespace {

// The accumulator every implementation uses: f64 only for f64 outputs, else f32.
DType accumulator_dtype(const GluProblem& p) {
  return p.out_dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
}

// Terms of the error model's accumulation length: K products and sums, plus one rounding of each
// input to the accumulator type (f64 weights with an f32 x are rounded to f32 first).
// A precision preset sums P products of pieces per term (P K terms, each exact in f32).
double accumulation_length(const GluProblem& p) {
  return static_cast<double>(std::max<int64_t>(p.K, 1) * p.precision_plan().passes()) + 2.0;
}

}  // namespace

template <>
TensorMap ProblemOp<GluProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  const GluProblem p = GluProblem::from(args);
  TensorMap inputs;
  const double scale = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(p.K, 1)));
  inputs.emplace("x", normal_tensor(args.tensor("x"), seed, "x"));
  if (p.fused_weights) {
    inputs.emplace("weights", normal_tensor(args.tensor("weights"), seed, "weights", scale));
  } else {
    // The same values as the fused [K, 2, N] of this seed would hold, split.
    const Tensor fused =
        normal_tensor(TensorSpec{p.w_dtype, {p.K, 2, p.N}}, seed, "weights", scale);
    Tensor gate(args.tensor("gate_weights")), proj(args.tensor("proj_weights"));
    for (int64_t k = 0; k < p.K; ++k) {
      for (int64_t n = 0; n < p.N; ++n) {
        gate.set(k * p.N + n, fused.get((k * 2 + 0) * p.N + n));
        proj.set(k * p.N + n, fused.get((k * 2 + 1) * p.N + n));
      }
    }
    inputs.emplace("gate_weights", std::move(gate));
    inputs.emplace("proj_weights", std::move(proj));
  }
  return inputs;
}

template <>
double ProblemOp<GluProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  return 2.0 * static_cast<double>(std::max<int64_t>(GluProblem::from(args).K, 1));
}

template <>
ErrorModel ProblemOp<GluProblem>::error_model(const BoundArgs& args) const {
  const GluProblem p = GluProblem::from(args);
  ErrorModel model;
  model.accumulation_roundoff = unit_roundoff(accumulator_dtype(p));
  model.accumulation_length = accumulation_length(p);
  model.output_roundoff = unit_roundoff(p.out_dtype());
  model.operand_roundoff = p.precision_plan().operand_roundoff;
  return model;
}

DType GatedLinearUnitOp::compute_dtype(const BoundArgs& args) const {
  const PrecisionPlan plan = GluProblem::from(args).precision_plan();
  return plan.identity() ? Op::compute_dtype(args) : plan.piece_dtype;
}

}  // namespace tokamax
