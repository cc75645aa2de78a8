// linear_softmax_cross_entropy_loss_vjp: the math spec of the loss's gradient (binding, counts,
// inputs, reference and oracle).
//
// Dimensions.
//   B      rows of x (tokens), one label each
//   H      hidden size: the contraction extent of the logits x @ w
//   V      vocabulary size: logits per row, classes of the labels
//   z, p   logits z = x @ w [B, V] and their row softmax p (never materialised by the kernels)
//
// From the forward's arguments plus the cotangent dloss of its output `loss` (f32[B] for
// reduction none, f32[] otherwise):
//   c_b    = dloss[b] (none), dloss (sum), dloss / B (mean), and 0 for a row whose label is
//            outside [0, V) (padding: the forward gives it zero loss whatever x and w are)
//   dz_b   = c_b (p_b - onehot(label_b))         the cotangent of row b's logits
//   dx     = dz w^T                              [B, H], a contraction over V
//   dw     = x^T dz                              [H, V], a contraction over B
// dx has x's spec and dw w's (the gradient of an input is of that input's type). labels get no
// gradient.
//
// Optional input lse f32[B]: the forward's residual (return_residuals), each row's log-sum-exp.
// Given, the cpu kernel takes p = exp(z - lse) from it (three products); without it, the kernel
// first recomputes the row statistics (a fourth). The reference and the oneDNN composite compute
// the softmax from the logits either way.
#pragma once

#include <string_view>
#include <vector>

#include "ops/framework/bound_args.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"
#include "ops/linear_softmax_cross_entropy_loss/base.h"

namespace tokamax {

// The parsed view of linear_softmax_cross_entropy_loss_vjp's BoundArgs: the forward problem
// (dloss is f32 of the forward output's shape, so it needs no field of its own) and whether the
// residual lse is an input.
struct LinearSoftmaxCrossEntropyVjpProblem {
  static constexpr std::string_view kOp = "linear_softmax_cross_entropy_loss_vjp";
  static constexpr std::string_view kSummary =
      "linear_softmax_cross_entropy_loss's VJP: dx = dz w^T, dw = x^T dz with dz = c (p - "
      "onehot), the logits recomputed per V chunk, never materialised; optional residual "
      "lse [B] f32 (the forward's, with return_residuals)";
  LinearSoftmaxCrossEntropyProblem fwd;
  bool has_lse = false;
  static LinearSoftmaxCrossEntropyVjpProblem from(const BoundArgs& args);
};

// c_b of the header comment for every row, in f64 (the mean's 1/B folded in; 0 for padding).
// Checks labels (InvalidArgument unless i32[B]) and dloss (f32 of the forward output's shape).
std::vector<double> lsce_vjp_row_weights(const LinearSoftmaxCrossEntropyVjpProblem& p,
                                         const Tensor& labels,  // [B] i32
                                         const Tensor& dloss);  // [B] or [] f32

class LinearSoftmaxCrossEntropyLossVjpOp : public ProblemOp<LinearSoftmaxCrossEntropyVjpProblem> {
 public:
  const Op* primal() const override;
  std::vector<std::string> cotangents() const override { return {"dloss"}; }
};

// The portable reference, accumulating in `Acc` (Acc = double: the float64 oracle of both
// outputs). Row by row: the logits in Acc, their softmax, dz, then dx's row and dw's rank-1
// update (an [H, V] Acc accumulator, the size of w: the [B, V] logits never exist).
template <typename Acc>
void linear_softmax_cross_entropy_vjp_reference(const LinearSoftmaxCrossEntropyVjpProblem& problem,
                                                // Inputs.
                                                const Tensor& x,       // [B, H]
                                                const Tensor& labels,  // [B] i32
                                                const Tensor& w,       // [H, V]
                                                const Tensor& dloss,   // [B] or [] f32
                                                // Outputs.
                                                Tensor& dx,   // [B, H] x's dtype
                                                Tensor& dw);  // [H, V] w's dtype

}  // namespace tokamax
