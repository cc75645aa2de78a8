// gated_linear_unit_vjp: seeded inputs, the error model of the float64 oracle of every gradient
// (oracle.cc; the reference is in reference.cc).
//
// Dimensions.
//   M, K, N   as base.h; H [M, 2N] = [dg | dp]
//   g, p      the exact gate and projection of one (row, column); a = act(g), a' = act'(g)
//   Mg, Mp    sum_k |x_k Wg[k, n]| and sum_k |x_k Wp[k, n]|
//   u         the accumulator's unit roundoff (f32; f64 for f64 x); nK = K + 2
//
// Error model. An implementation recomputes g^ and p^ as the forward does, |g^ - g| <= gK Mg and
// |p^ - p| <= gK Mp with gK = gamma_(nK) (the forward's bound, ops/gated_linear_unit/
// oracle.cc), then forms H^ in the accumulator. With C2 = activation_curvature (|a''|),
// L = activation_lipschitz and c = kActivationEvalUlps (act and act' each evaluated within
// c u (1 + |y| + |act(y)|)):
//   |dg^ - dg| <= |dout| [ |a'| gK Mp + (|p| + gK Mp) (C2 gK Mg + c u (1 + |g| + gK Mg) + j) ]
//                 + 2 u |dg|        (j = 1 for relu where gK Mg >= |g|: its derivative's step)
//   |dp^ - dp| <= |dout| [ L gK Mg + c u (|g| + |a| + (1 + L) gK Mg) ] + u |dp|
// With bf16 x and bf16 weights, H^ may also be rounded to bf16 before the two products below, as
// JAX's autodiff of a bf16 forward does (its cotangents take the primal's dtype) and the cpu
// kernel's bf16_path native_dot does (so that both products run on bf16 pairs): each bound then
// gains uh |dg| and uh |dp|, uh = u_bf16 = 2^-8 (glu_vjp_h_roundoff; 0 for other dtypes).
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
#include "ops/gated_linear_unit/vjp/base.h"

namespace tokamax {
namespace {

DType accumulator(const GluProblem& p) {
  return p.x_dtype == DType::kF64 ? DType::kF64 : DType::kF32;
}

}  // namespace

double glu_vjp_h_roundoff(const GluProblem& p) {
  return p.x_dtype == DType::kBF16 && p.w_dtype == DType::kBF16 ? unit_roundoff(DType::kBF16) : 0.0;
}

template <>
TensorMap ProblemOp<GluVjpProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  // The forward's inputs (x ~ N(0, 1), weights ~ N(0, 1/K)) and a cotangent ~ N(0, 1).
  TensorMap inputs = gated_linear_unit_op().make_inputs(
      primal_args(gated_linear_unit_op(), args, cotangents()), seed);
  inputs.emplace("dout", normal_tensor(args.tensor("dout"), seed, "dout"));
  return inputs;
}

template <>
double ProblemOp<GluVjpProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  // A weight gradient needs every row of H (2 N K each, shared by the samples of one call).
  const GluProblem p = GluProblem::from(args);
  return 2.0 * static_cast<double>(std::max<int64_t>(p.K, 1)) * static_cast<double>(p.N);
}

template <>
ErrorModel ProblemOp<GluVjpProblem>::error_model(const BoundArgs& args) const {
  const GluProblem p = GluProblem::from(args);
  ErrorModel model;
  model.accumulation_roundoff = unit_roundoff(accumulator(p));
  model.accumulation_length = 1.0;  // each point's term counts are in its magnitude
  model.output_roundoff = std::max(unit_roundoff(p.x_dtype), unit_roundoff(p.w_dtype));
  return model;
}

}  // namespace tokamax
