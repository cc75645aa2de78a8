// linear_softmax_cross_entropy_loss: the math spec (binding, validation, counts, inputs,
// reference and oracle).
//
// Dimensions.
//   B      rows of x (tokens), one label each
//   H      hidden size: the contraction extent of the logits x @ w
//   V      vocabulary size: logits per row, classes of the labels
//
// loss_i = logsumexp_j(z_ij) - z_i,label_i with z = x @ w; reduction "none" returns loss[B],
// "sum" and "mean" a scalar f32[]. A label outside [0, V) (padding, typically -1) contributes
// zero loss, and "mean" still divides by B, as upstream's (a one-hot of such a label is zero).
// `padded_labels` (catalogs only, default 0) is the fraction of rows whose generated label is
// -1. `return_residuals: true` adds a second output lse f32[B], each row's log-sum-exp
// logsumexp_j(z_ij) (padding rows included): the residual the VJP op takes as its `lse` input,
// as upstream's forward saves it for its backward.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ops/common/precision.h"
#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

enum class LsceReduction { kNone, kSum, kMean };
std::string_view lsce_reduction_name(LsceReduction reduction);
// "none" | "sum" | "mean"; InvalidArgument naming `reduction` otherwise.
LsceReduction parse_lsce_reduction(std::string_view name);

// The parsed, validated view of the BoundArgs that implementations work with.
struct LinearSoftmaxCrossEntropyProblem {
  static constexpr std::string_view kOp = "linear_softmax_cross_entropy_loss";
  static constexpr std::string_view kSummary =
      "cross-entropy of softmax(x[B,H] @ w[H,V]) against labels[B], never materialising "
      "the logits";
  int64_t B = 0, H = 0, V = 0;
  DType x_dtype = DType::kF32;
  DType w_dtype = DType::kBF16;
  LsceReduction reduction = LsceReduction::kSum;
  bool return_residuals = false;  // outputs lse [B] f32 beside the loss
  // Upstream's `precision` of the logits' product (ops/common/precision.h).
  DotPrecision precision = DotPrecision::kDefault;

  // Elements of the output "loss": B for reduction none, else 1 (a scalar).
  int64_t output_elements() const { return reduction == LsceReduction::kNone ? B : 1; }
  PrecisionPlan precision_plan() const { return plan_precision(precision, x_dtype, w_dtype); }
  // The problem the kernels multiply: with a precision that expands the operands, H is P H and x
  // and w are the pieces' dtype (expand_lsce_precision_operands makes its inputs); else this.
  LinearSoftmaxCrossEntropyProblem computed() const;
  static LinearSoftmaxCrossEntropyProblem from(const BoundArgs& args);
};

// x and w expanded for the problem's precision (precision.h: pieces side by side along H), the
// inputs of problem.computed(); `inputs` unchanged when the precision is the identity.
TensorMap expand_lsce_precision_operands(const LinearSoftmaxCrossEntropyProblem& problem,
                                         const TensorMap& inputs);

// Throws InvalidArgument unless labels is i32[B]. Every implementation calls it before it
// computes anything.
void check_lsce_labels(const LinearSoftmaxCrossEntropyProblem& p,
                       const Tensor& labels);  // [B] i32

// Whether a row's label counts: in [0, V). Other labels (padding) give the row zero loss.
inline bool lsce_label_counts(int32_t label, int64_t V) { return label >= 0 && label < V; }

// The loss output from each row's loss (B values): the rows themselves, their sum or their mean
// (over B, padding rows included), as the problem's reduction says; summed in double. The vendor
// composites' last step.
void write_lsce_loss(const LinearSoftmaxCrossEntropyProblem& p, const double* row_loss, float* out);

// The base class of the forward op.
class LinearSoftmaxCrossEntropyLossOp : public ProblemOp<LinearSoftmaxCrossEntropyProblem> {
 public:
  // A precision preset multiplies its pieces (bf16, f16, or tf32 on the f32 units).
  DType compute_dtype(const BoundArgs& args) const override;
};

// The portable reference: any float dtypes, logits and log-sum-exp accumulated in `Acc`, the
// reduction too. With Acc = double it is the float64 oracle of the whole output. Checks labels.
// `lse`, when given, gets every row's log-sum-exp (the residual of return_residuals).
template <typename Acc>
void linear_softmax_cross_entropy_reference(const LinearSoftmaxCrossEntropyProblem& problem,
                                            // Inputs.
                                            const Tensor& x,       // [B, H]
                                            const Tensor& labels,  // [B] i32
                                            const Tensor& w,       // [H, V]
                                            // Outputs.
                                            Tensor& loss,            // [B] or [] f32
                                            Tensor* lse = nullptr);  // [B] f32

}  // namespace tokamax
