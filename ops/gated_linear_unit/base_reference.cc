// gated_linear_unit: seeded inputs, the oracle's cost and error model (the float64 oracle itself
// is in oracle.cc), the reference.
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

TensorMap GatedLinearUnitBase::make_inputs(const BoundArgs& args, uint64_t seed) const {
  const GluProblem p = GluProblem::from(args);
  TensorMap inputs;
  const double scale = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(p.K, 1)));
  inputs.emplace("x", normal_tensor(args.tensor("x"), seed, "x"));
  if (p.fused_weights) {
    inputs.emplace("weights", normal_tensor(args.tensor("weights"), seed, "weights", scale));
  } else {
    // The same values as the fused [K, 2, N] of this seed would hold, split.
    const Tensor fused = normal_tensor(TensorSpec{p.w_dtype, {p.K, 2, p.N}}, seed, "weights", scale);
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

double GatedLinearUnitOp::oracle_cost_per_output(const BoundArgs& args) const {
  return 2.0 * static_cast<double>(std::max<int64_t>(GluProblem::from(args).K, 1));
}

ErrorModel GatedLinearUnitOp::error_model(const BoundArgs& args) const {
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

template <typename Acc>
void gated_linear_unit_reference(const GluProblem& p, const Tensor& x, const GluWeights& weights,
                                 Tensor& out) {
  const int64_t M = p.M, K = p.K, N = p.N;
  std::vector<Acc> gate(static_cast<size_t>(N)), proj(static_cast<size_t>(N));
  dispatch_float(p.x_dtype, [&](auto x_type) {
    using X = decltype(x_type);
    dispatch_float(p.w_dtype, [&](auto w_type) {
      using W = decltype(w_type);
      const X* x_data = x.data<X>();
      const W* gate_data = static_cast<const W*>(weights.gate);
      const W* proj_data = static_cast<const W*>(weights.proj);
      dispatch_float(p.out_dtype(), [&](auto out_type) {
      using O = decltype(out_type);
      O* out_data = out.data<O>();
      for (int64_t row = 0; row < M; ++row) {
        std::fill(gate.begin(), gate.end(), Acc(0));
        std::fill(proj.begin(), proj.end(), Acc(0));
        // k-outer, n-inner: weight rows are contiguous, and every output still sums its K terms
        // in order k = 0..K-1.
        for (int64_t k = 0; k < K; ++k) {
          const Acc xk = static_cast<Acc>(to_double(x_data[row * K + k]));
          const W* w_gate = gate_data + k * weights.ld;
          const W* w_proj = proj_data + k * weights.ld;
          for (int64_t n = 0; n < N; ++n) {
            gate[n] += xk * static_cast<Acc>(to_double(w_gate[n]));
            proj[n] += xk * static_cast<Acc>(to_double(w_proj[n]));
          }
        }
        for (int64_t n = 0; n < N; ++n) {
          const Acc a = apply_activation<Acc>(p.activation, gate[n]);
          out_data[row * N + n] = from_double<O>(static_cast<double>(a * proj[n]));
        }
      }
      });
    });
  });
}

template void gated_linear_unit_reference<float>(const GluProblem&, const Tensor&,
                                                 const GluWeights&, Tensor&);
template void gated_linear_unit_reference<double>(const GluProblem&, const Tensor&,
                                                  const GluWeights&, Tensor&);

namespace {

void run_reference(const GluProblem& given, const TensorMap& given_inputs, TensorMap& outputs) {
  // A precision preset: the portable product of the expanded pieces (precision.h).
  const GluProblem problem = given.computed();
  const TensorMap inputs = expand_glu_precision_operands(given, given_inputs);
  Tensor& out = outputs.at("out");
  // f64 outputs accumulate in f64; everything else in f32, as upstream's reference does.
  const GluWeights weights = glu_weights(problem, inputs);
  if (problem.out_dtype() == DType::kF64) {
    gated_linear_unit_reference<double>(problem, inputs.at("x"), weights, out);
  } else {
    gated_linear_unit_reference<float>(problem, inputs.at("x"), weights, out);
  }
}

}  // namespace

const Implementation& gated_linear_unit_reference_implementation() {
  static const ReferenceImplementation<GluProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
