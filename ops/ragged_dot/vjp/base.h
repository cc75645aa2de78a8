// ragged_dot_vjp: the math spec of ragged_dot's gradient (binding, counts, inputs, reference and
// oracle).
//
// Dimensions.
//   G      groups (experts) of rhs
//   M      rows of lhs, split into consecutive groups by group_sizes
//   K      contraction extent of the forward product
//   N      columns of rhs and of the forward output
//   rows   sum(group_sizes) <= M; rows past it (and of groups outside group_offset's shard) had a
//          zero forward output, so their dlhs is zero
//
// From the forward's arguments plus the cotangent dout[M, N] of its output:
//   dlhs[m, :]  = dout[m, :] rhs[g]^T          (g: the group of row m; a contraction over N)
//   drhs[g]     = lhs_g^T dout_g               (lhs_g, dout_g: the rows of group g; a
//                                               contraction over the ragged dimension, zeros
//                                               for an empty group)
// dlhs has lhs's spec and drhs rhs's (the gradient of an input is of that input's type), each
// accumulated in f32 (f64 for an f64 cotangent). Only the plain grouped matmul (and its
// group_offset) is differentiated here: the epilogue and quantization arguments are refused by
// bind.
#pragma once

#include <string_view>

#include "ops/framework/bound_args.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"
#include "ops/ragged_dot/base.h"

namespace tokamax {

// The parsed view of ragged_dot_vjp's BoundArgs: the forward problem (out_dtype = dout's dtype)
// plus the gradients' dtypes.
struct RaggedDotVjpProblem {
  static constexpr std::string_view kOp = "ragged_dot_vjp";
  static constexpr std::string_view kSummary =
      "ragged_dot's VJP: dlhs = dout rhs[g]^T per group, drhs[g] = lhs_g^T dout_g";
  RaggedDotProblem fwd;
  DType dout_dtype = DType::kF32;
  DType dlhs_dtype = DType::kF32;  // = lhs's
  DType drhs_dtype = DType::kF32;  // = rhs's

  // The largest group: the longest contraction of drhs.
  int64_t max_group_rows() const;
  static RaggedDotVjpProblem from(const BoundArgs& args);
};

class RaggedDotVjpOp : public ProblemOp<RaggedDotVjpProblem> {
 public:
  const Op* primal() const override;
  std::vector<std::string> cotangents() const override { return {"dout"}; }
};

// The portable reference, accumulating in `Acc` (Acc = double: the float64 oracle of both
// outputs).
template <typename Acc>
void ragged_dot_vjp_reference(const RaggedDotVjpProblem& problem,
                              // Inputs.
                              const Tensor& lhs,   // [M, K]
                              const Tensor& rhs,   // [G, K, N]
                              const Tensor& dout,  // [M, N]
                              // Outputs.
                              Tensor& dlhs,   // [M, K] lhs's dtype
                              Tensor& drhs);  // [G, K, N] rhs's dtype

}  // namespace tokamax
