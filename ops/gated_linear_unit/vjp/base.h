// gated_linear_unit_vjp: the math spec of the GLU's gradient (binding, counts, inputs, reference
// and oracle).
//
// Dimensions.
//   M      rows of x, *B flattened
//   K      contraction extent of the forward products
//   N      output features (gate and projection each have N columns)
//   H      [M, 2N]: the cotangents of the gate and projection products, [dg | dp]
//
// With g = x Wg, p = x Wp, a = act(g) and out = a p, for the cotangent dout [*B, M, N]:
//   dg = dout p act'(g),  dp = dout a                     (H = [dg | dp], [M, 2N])
//   dx = dg Wg^T + dp Wp^T = H [Wg | Wp]^T                (a contraction over 2N)
//   dWg = x^T dg,  dWp = x^T dp                           (contractions over M)
// The gradients take their inputs' specs: dx x's, dweights weights' [K, 2, N] (or, unfused,
// dgate_weights and dproj_weights [K, N]).
#pragma once

#include <string_view>

#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"
#include "ops/gated_linear_unit/base.h"

namespace tokamax {

// The parsed view of gated_linear_unit_vjp's BoundArgs: the forward problem (dout has the
// forward output's spec: x's dtype).
struct GluVjpProblem {
  static constexpr std::string_view kOp = "gated_linear_unit_vjp";
  static constexpr std::string_view kSummary =
      "gated_linear_unit's VJP: dx = [dg | dp] [Wg | Wp]^T, dweights = x^T [dg | dp]";
  GluProblem fwd;
  static GluVjpProblem from(const BoundArgs& args);
};

// The weight gradients as two [K, N] matrices with one row stride, in the outputs: views into
// dweights [K, 2, N] (ld = 2N, dWp at +N) or dgate_weights / dproj_weights (ld = N).
struct GluWeightGrads {
  void* gate = nullptr;
  void* proj = nullptr;
  int64_t ld = 0;
  DType dtype = DType::kF32;
};
GluWeightGrads glu_weight_grads(const GluProblem& problem, TensorMap& outputs);

// The unit roundoff of H [M, 2N] as an implementation may hold it between its products: bf16's
// for bf16 x and bf16 weights (H in the primal's dtype, as JAX's autodiff has it), else 0 (H in
// the accumulator). Part of the error model (base_numerics.cc).
double glu_vjp_h_roundoff(const GluProblem& problem);

class GatedLinearUnitVjpOp : public ProblemOp<GluVjpProblem> {
 public:
  const Op* primal() const override;
  std::vector<std::string> cotangents() const override { return {"dout"}; }
};

// The portable reference, both forward products, H and both gradient products accumulated in
// `Acc` (Acc = double: the float64 oracle of every output).
template <typename Acc>
void gated_linear_unit_vjp_reference(const GluVjpProblem& problem,
                                     // Inputs.
                                     const Tensor& x,  // [*B, M, K]
                                     const GluWeights& weights,
                                     const Tensor& dout,  // [*B, M, N] x's dtype
                                     // Outputs.
                                     Tensor& dx,  // x's spec
                                     const GluWeightGrads& dweights);

}  // namespace tokamax
