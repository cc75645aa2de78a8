// linear_softmax_cross_entropy_loss_vjp: binding (the forward's, plus dloss), the per-row weights
// c_b, FLOP/byte counts.
//
// Dimensions: as base.h (B, H, V).
#include "ops/linear_softmax_cross_entropy_loss/vjp/base.h"

#include <string>

#include "ops/framework/errors.h"
#include "ops/framework/vjp.h"
#include "ops/linear_softmax_cross_entropy_loss/api.h"

namespace tokamax {

LinearSoftmaxCrossEntropyVjpProblem LinearSoftmaxCrossEntropyVjpProblem::from(
    const BoundArgs& args) {
  LinearSoftmaxCrossEntropyVjpProblem p;
  p.fwd = LinearSoftmaxCrossEntropyProblem::from(args);
  p.has_lse = args.has("lse");
  return p;
}

std::vector<double> lsce_vjp_row_weights(const LinearSoftmaxCrossEntropyVjpProblem& vp,
                                         const Tensor& labels, const Tensor& dloss) {
  const LinearSoftmaxCrossEntropyProblem& p = vp.fwd;
  check_lsce_labels(p, labels);
  if (dloss.dtype() != DType::kF32 || dloss.num_elements() != p.output_elements()) {
    throw InvalidArgument(std::string(LinearSoftmaxCrossEntropyVjpProblem::kOp) +
                              ": dloss must be f32 of the loss's shape (" +
                              std::to_string(p.output_elements()) + " elements), got " +
                              dloss.spec().to_string(),
                          "dloss");
  }
  const int32_t* label = labels.data<int32_t>();
  const float* d = dloss.data<float>();
  std::vector<double> c(static_cast<size_t>(p.B), 0.0);
  for (int64_t b = 0; b < p.B; ++b) {
    if (!lsce_label_counts(label[b], p.V)) continue;  // padding: no dependence on x or w
    switch (p.reduction) {
      case LsceReduction::kNone:
        c[b] = d[b];
        break;
      case LsceReduction::kSum:
        c[b] = d[0];
        break;
      case LsceReduction::kMean:  // the forward divides by B, padding rows included
        c[b] = static_cast<double>(d[0]) / static_cast<double>(p.B);
        break;
    }
  }
  return c;
}

const Op* LinearSoftmaxCrossEntropyLossVjpOp::primal() const {
  return &linear_softmax_cross_entropy_loss_op();
}

template <>
BoundArgs ProblemOp<LinearSoftmaxCrossEntropyVjpProblem>::bind_canonical(
    const nlohmann::json& args) const {
  const std::string prefix = std::string(name()) + ": ";
  // lse is the VJP's own input (the forward's residual): taken out before the forward binds the
  // rest, checked against the bound shape, and kept in the canonical args only when given.
  nlohmann::json forward = args;
  nlohmann::json lse;
  if (args.is_object()) {
    if (args.contains("return_residuals")) {
      throw InvalidArgument(prefix +
                                "return_residuals is the forward's option (its lse output "
                                "is this op's optional input 'lse')",
                            "return_residuals");
    }
    if (args.contains("lse")) {
      lse = args.at("lse");
      forward.erase("lse");
    }
  }
  BoundArgs bound = bind_vjp(linear_softmax_cross_entropy_loss_op(), name(), forward, cotangents());
  // A preset that rounds the operands would need the gradient's products expanded each its own
  // way: refused by name until they are, never ignored.
  if (const auto p = LinearSoftmaxCrossEntropyProblem::from(bound);
      !p.precision_plan().identity()) {
    throw InvalidArgument(prefix + "precision=" + std::string(precision_name(p.precision)) +
                              " is not implemented for the gradient (default, high, highest and "
                              "presets that keep these operands as they are run)",
                          "precision");
  }
  if (lse.is_null()) return bound;
  const TensorSpec want{DType::kF32, {LinearSoftmaxCrossEntropyProblem::from(bound).B}};
  if (!lse.is_string()) {
    throw InvalidArgument(
        prefix + "lse must be a tensor spec like " + want.to_string() + ", got " + lse.dump(),
        "lse");
  }
  TensorSpec spec;
  try {
    spec = parse_tensor_spec(lse.get<std::string>());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(prefix + "lse " + e.what(), "lse");
  }
  if (spec != want) {
    throw InvalidArgument(prefix + "lse must be " + want.to_string() +
                              " (the forward's per-row log-sum-exp), got " + spec.to_string(),
                          "lse");
  }
  bound.args["lse"] = spec.to_string();
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<LinearSoftmaxCrossEntropyVjpProblem>::inputs(
    const BoundArgs& args) const {
  std::vector<TensorDecl> decls = linear_softmax_cross_entropy_loss_op().inputs(args);
  decls.push_back({"dloss", args.tensor("dloss")});
  if (args.has("lse")) decls.push_back({"lse", args.tensor("lse")});
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<LinearSoftmaxCrossEntropyVjpProblem>::outputs(
    const BoundArgs& args) const {
  return {{"dx", args.tensor("x")}, {"dw", args.tensor("w")}};
}

template <>
double ProblemOp<LinearSoftmaxCrossEntropyVjpProblem>::flops(const BoundArgs& args) const {
  // The gradient's own work: the logits (x w), dx = dz w^T and dw = x^T dz, three products of
  // the forward's size, plus the softmax and dz per logit (max, subtract, exp, add, scale: 5).
  // Kernels that first recompute the per-row log-sum-exp (when lse is not an input) run a fourth
  // product that is not counted: GFLOP/s compare like with like.
  const LinearSoftmaxCrossEntropyProblem p = LinearSoftmaxCrossEntropyProblem::from(args);
  const double logits = static_cast<double>(p.B) * static_cast<double>(p.V);
  return 6.0 * logits * static_cast<double>(p.H) + 5.0 * logits;
}

template <>
double ProblemOp<LinearSoftmaxCrossEntropyVjpProblem>::bytes(const BoundArgs& args) const {
  // x, w, labels and dloss read once, dx and dw written once: the logits never reach memory.
  const LinearSoftmaxCrossEntropyProblem p = LinearSoftmaxCrossEntropyProblem::from(args);
  return 2.0 * static_cast<double>(p.B) * p.H * dtype_size(p.x_dtype) +
         2.0 * static_cast<double>(p.H) * p.V * dtype_size(p.w_dtype) + 4.0 * p.B +
         4.0 * static_cast<double>(p.output_elements()) + (args.has("lse") ? 4.0 * p.B : 0.0);
}

}  // namespace tokamax
