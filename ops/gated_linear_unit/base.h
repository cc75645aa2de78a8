// gated_linear_unit: the math spec (binding, validation, counts, inputs, reference and oracle).
//
// Dimensions.
//   B      leading batch extents of x (*B, any number, possibly none)
//   M      rows of x: the product of B and x's second-to-last extent, flattened
//   K      contraction extent (x's last extent, weights' first)
//   N      output features; weights[:, 0, :] is the gate Wg, weights[:, 1, :] the projection Wp
//          (or, unfused, gate_weights [K, N] = Wg and proj_weights [K, N] = Wp)
//
// out[*B, M, N] = act(x @ Wg) * (x @ Wp), both products accumulated in >= f32, the output in x's
// dtype.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ops/common/activation.h"
#include "ops/common/precision.h"
#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// The parsed, validated view of gated_linear_unit's BoundArgs that implementations work with.
struct GluProblem {
  static constexpr std::string_view kOp = "gated_linear_unit";
  static constexpr std::string_view kSummary =
      "act(x @ weights[:,0,:]) * (x @ weights[:,1,:]) for x[*B,M,K], weights[K,2,N] "
      "(or gate_weights, proj_weights [K,N])";
  int64_t M = 0, K = 0, N = 0;  // M flattens *B
  std::vector<int64_t> x_dims;  // [*B, M_last, K] as given
  DType x_dtype = DType::kF32;
  DType w_dtype = DType::kF32;
  DType output_dtype = DType::kF32;  // x's as given (also in computed(), whose x is pieces)
  Activation activation = Activation::kNone;
  // true: one weights [K, 2, N]; false: gate_weights and proj_weights [K, N] (same dtype).
  bool fused_weights = true;
  // Upstream's `precision` (ops/common/precision.h): default multiplies the operands as given.
  DotPrecision precision = DotPrecision::kDefault;

  DType out_dtype() const { return output_dtype; }
  PrecisionPlan precision_plan() const { return plan_precision(precision, x_dtype, w_dtype); }
  // The problem the kernels multiply: with a precision that expands the operands, K is P K and x
  // and the weights are the pieces' dtype (expand_glu_precision_operands makes its inputs).
  GluProblem computed() const;
  // Output dims: x's with the last extent replaced by N.
  std::vector<int64_t> out_dims() const;
  static GluProblem from(const BoundArgs& args);
};

// Wg and Wp as two row-major [K, N] matrices with one row stride `ld`: views into the fused
// weights [K, 2, N] (ld = 2N, Wp at +N) or the unfused gate_weights / proj_weights (ld = N).
struct GluWeights {
  const void* gate = nullptr;
  const void* proj = nullptr;
  int64_t ld = 0;
  DType dtype = DType::kF32;
  // Element (k, n) of Wg (j = 0) or Wp (j = 1), as double.
  double get(int j, int64_t k, int64_t n) const;
};
GluWeights glu_weights(const GluProblem& problem, const TensorMap& inputs);
// x and the weights expanded for the problem's precision (precision.h: pieces side by side along
// K), the inputs of problem.computed(); `inputs` unchanged when the precision is the identity.
TensorMap expand_glu_precision_operands(const GluProblem& problem, const TensorMap& inputs);

// x: a float tensor of rank >= 2 [*B, M, K]; weights: float [K, 2, N], or gate_weights and
// proj_weights: float [K, N] each (the same dtype); activation: a name of ops/common/activation.h
// (default "none"). Inputs: x ~ N(0, 1) (a post-layer-norm activation) and weights ~ N(0, 1/K)
// (fan-in initialised), so both products stay O(1) at any K and low-precision outputs neither
// overflow nor underflow.
class GatedLinearUnitOp : public ProblemOp<GluProblem> {
 public:
  // A precision preset multiplies its pieces (bf16, f16, or tf32 on the f32 units).
  DType compute_dtype(const BoundArgs& args) const override;
};

// The portable reference: every float dtype combination, both products accumulated in `Acc`
// (k = 0..K-1 in order) and the activation evaluated in `Acc`. With Acc = double it computes the
// float64 oracle of the whole output.
template <typename Acc>
void gated_linear_unit_reference(const GluProblem& problem,
                                 // Inputs.
                                 const Tensor& x,  // [*B, M, K]
                                 const GluWeights& weights,
                                 // Outputs.
                                 Tensor& out);  // [*B, M, N] x's dtype

}  // namespace tokamax
