// triangle_multiplication_vjp: the math spec of the triangle update's gradient (binding, counts,
// inputs, reference and oracle).
//
// Dimensions.
//   N, C, H, D, P   as ops/triangle_multiplication/base.h
//   W               4 H + D: the columns of [gate_in (2H) | projection_in (2H) | gate_out (D)]
//
// With the forward's stages (base.h of the forward: a = layer_norm_in(x), g | pr | q = a
// [gate_in | projection_in | gate_out], s = sigmoid(g), v = s pr mask = [L | R], act the
// triangle product, b = layer_norm_out(act), o = b projection_out, out = o sigmoid(q)), for the
// cotangent dout [N, N, D]:
//   do = dout sigmoid(q),  dq = dout o sigmoid'(q)
//   dprojection_out = b^T do,  db = do projection_out^T
//   dact, dlayernorm_out_scale / offset = layer_norm_out's gradient of db
//   outgoing (act_h = L_h R_h^T):  dL_h = dact_h R_h,    dR_h = dact_h^T L_h
//   incoming (act_h = R_h^T L_h):  dL_h = R_h dact_h,    dR_h = L_h dact_h^T
//   dg = dv mask pr sigmoid'(g),  dpr = dv mask s          (dv = [dL | dR])
//   Z = [dg | dpr | dq] [P, W]:  d[gate_in | projection_in | gate_out] = a^T Z,  da = Z W_in^T
//   dx, dlayernorm_in_scale / offset = layer_norm_in's gradient of da
// Every gradient takes its input's spec; the mask has none.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"
#include "ops/triangle_multiplication/base.h"

namespace tokamax {

// The parsed view of triangle_multiplication_vjp's BoundArgs: the forward problem (dout has the
// forward output's spec).
struct TriangleVjpProblem {
  static constexpr std::string_view kOp = "triangle_multiplication_vjp";
  static constexpr std::string_view kSummary =
      "triangle_multiplication's VJP: the gradients of x and of the eight weights and norms";
  TriangleMultiplicationProblem fwd;
  static TriangleVjpProblem from(const BoundArgs& args);
};

class TriangleMultiplicationVjpOp : public ProblemOp<TriangleVjpProblem> {
 public:
  const Op* primal() const override;
  std::vector<std::string> cotangents() const override { return {"dout"}; }
};

// The weight gradients as an implementation sums them in f32: [gate_in | projection_in |
// gate_out] [C, W] (the layout of rows.h's w_in), projection_out [H, D], and the two norms'
// scale and offset sums.
struct TriangleWeightSums {
  const float* w_in = nullptr;
  const float* w_out = nullptr;
  const float* in_scale = nullptr;
  const float* in_offset = nullptr;
  const float* out_scale = nullptr;
  const float* out_offset = nullptr;
};
// Each rounded once into its output d<name> (its input's dtype).
void store_triangle_weight_grads(const TriangleMultiplicationProblem& p,
                                 const TriangleWeightSums& sums, TensorMap& outputs);

// The portable reference: the forward's stages and the gradient's as plain f32 loops, every
// intermediate in f32, each gradient rounded once to its input's dtype.
void triangle_multiplication_vjp_reference(const TriangleVjpProblem& problem,
                                           const TensorMap& inputs,  // the forward's and dout
                                           // Outputs.
                                           TensorMap& outputs);  // dx and d<weight> for each

}  // namespace tokamax
