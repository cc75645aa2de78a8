// triangle_multiplication_vjp: seeded inputs and the error model of the float64 oracle of every
// gradient (oracle.cc; the reference is in reference.cc).
//
// Dimensions: as base.h.
//
// Error model. Every intermediate z of the forward and of the gradient (base.h) carries, beside
// its exact value, a magnitude E_z in units of the f32 roundoff u such that an implementation
// computing in f32 gets |z^ - z| <= u E_z to first order. The rules, applied in the order of
// base.h (n' = gamma_n / u = n / (1 - n u); x, the weights and dout are exact):
//  - a contraction z = sum of n products a_k b_k, in any order:
//      E_z = sum (|a_k| E_b + E_a |b_k|) + n' sum |a_k b_k|
//    (n = C for g, pr, q; N for act, dL, dR; H for o; D for db; W = 4H + D for da; P + 1 for
//    the weight, scale and offset gradients, sums over every position);
//  - a product or sum of a few terms: the operands' errors carried through, plus one |result|
//    per rounding (e.g. v = s pr: |pr| E_s + s E_pr + |v|);
//  - sigmoid: E_s = E_z / 4 + c (|z| + s) (c = kActivationEvalUlps, ops/common/activation.h);
//    its derivative s (1 - s): |1 - 2 s| E_s + 3;
//  - a layer norm of a row x (n values) with its mean m, deviations d, variance var and
//    r = 1 / sqrt(var + epsilon): E_m = (sum E_x + n' sum |x|) / n + |m|,
//    E_d = E_x + E_m + |d|, E_var = (sum 2 |d| E_d + n' sum d^2) / n + var,
//    E_r = r (E_var / (2 (var + epsilon)) + 3), y = d r: r E_d + |d| E_r + |y|, the output
//    y s + o: |s| E_y + |y s| + |y s + o|;
//  - its gradient for a cotangent dy: g = dy s, the means m1 = mean(g), m2 = mean(g y) as
//    above, t = g - m1 - y m2 with E_g + E_m1 + |y| E_m2 + E_y |m2| + |y m2| + 2' (|g| + |m1|
//    + |y m2|), dx = r t with r E_t + E_r |t| + |dx|;
//  - for 16-bit x, v and dv may be rounded to x's dtype (the planes the triangle product
//    reads): + (u_x / u) |v| and (u_x / u) |dv| (triangle_vjp_x_rounding).
// Each gradient's magnitude is its E (times 1.05 for the second-order terms the rules leave out),
// so accumulation_length is 1 as in the other VJP ops; each output rounds once to its dtype
// (output_roundoff: the coarsest of x's and the weights'), with its subnormal spacing an
// absolute floor. The bound is first order in u but exact in the data: a dropped mask, a wrong
// triangle type or a gradient 1% off fails it (tests).
#include <algorithm>
#include <cmath>
#include <string>

#include "ops/framework/random.h"
#include "ops/framework/vjp.h"
#include "ops/triangle_multiplication/api.h"
#include "ops/triangle_multiplication/vjp/base.h"
#include "ops/triangle_multiplication/vjp/oracle.h"

namespace tokamax {

double triangle_vjp_x_rounding(const TriangleMultiplicationProblem& p) {
  return p.x_dtype == DType::kF32 ? 0.0 : unit_roundoff(p.x_dtype) / unit_roundoff(DType::kF32);
}

template <>
TensorMap ProblemOp<TriangleVjpProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  // The forward's inputs (base_numerics.cc of the forward) and a cotangent ~ N(0, 1).
  TensorMap inputs = triangle_multiplication_op().make_inputs(
      primal_args(triangle_multiplication_op(), args, {"dout"}), seed);
  inputs.emplace("dout", normal_tensor(args.tensor("dout"), seed, "dout"));
  return inputs;
}

template <>
double ProblemOp<TriangleVjpProblem>::oracle_cost_per_output(const BoundArgs&) const {
  // The oracle computes every gradient at once, cached for the nine outputs (oracle.cc): once it
  // has run, a sampled point costs a lookup.
  return 1.0;
}

template <>
ErrorModel ProblemOp<TriangleVjpProblem>::error_model(const BoundArgs& args) const {
  double output_roundoff = unit_roundoff(args.tensor("x").dtype);
  for (const char* name : kTriangleWeights) {
    output_roundoff = std::max(output_roundoff, unit_roundoff(args.tensor(name).dtype));
  }
  return ErrorModel{.accumulation_roundoff = unit_roundoff(DType::kF32),
                    .accumulation_length = 1.0,  // each point's term counts are in its magnitude
                    .output_roundoff = output_roundoff};
}

}  // namespace tokamax
