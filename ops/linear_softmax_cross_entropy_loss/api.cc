// linear_softmax_cross_entropy_loss: high-level API and the dispatch order of its implementations.
#include "ops/linear_softmax_cross_entropy_loss/api.h"

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& linear_softmax_cross_entropy_loss_cpu_implementation();
const Implementation& linear_softmax_cross_entropy_loss_reference_implementation();
const Implementation& linear_softmax_cross_entropy_loss_onednn_implementation();
const Implementation& linear_softmax_cross_entropy_loss_mkl_implementation();

// Fastest first; the vendor composite last, after the reference (which accepts every valid
// args), so "auto" never picks it; it is listed for bench, verify and tune.
template <>
std::vector<const Implementation*> ProblemOp<LinearSoftmaxCrossEntropyProblem>::implementations()
    const {
  return {&linear_softmax_cross_entropy_loss_cpu_implementation(),
          &linear_softmax_cross_entropy_loss_reference_implementation(),
          &linear_softmax_cross_entropy_loss_onednn_implementation(),
          &linear_softmax_cross_entropy_loss_mkl_implementation()};
}

const LinearSoftmaxCrossEntropyLossOp& linear_softmax_cross_entropy_loss_op() {
  static const LinearSoftmaxCrossEntropyLossOp op;
  return op;
}

namespace {

TensorMap run(const Tensor& x, const Tensor& labels, const Tensor& w,
              const LinearSoftmaxCrossEntropyOptions& options, bool return_residuals) {
  ApiCall call(linear_softmax_cross_entropy_loss_op());
  call.tensor("x", x).tensor("labels", labels).tensor("w", w);
  call.option("reduction", std::string(lsce_reduction_name(options.reduction)))
      .option("precision", std::string(precision_name(options.precision)));
  if (return_residuals) call.option("return_residuals", true);
  const BoundArgs bound = call.bind();
  // Values, not shapes: checked here too so that "auto" fails on a bad label before it tries
  // (and falls back across) any implementation.
  check_lsce_labels(LinearSoftmaxCrossEntropyProblem::from(bound), labels);
  return call.run(bound, options.implementation, options.config);
}

}  // namespace

Tensor linear_softmax_cross_entropy_loss(const Tensor& x, const Tensor& labels, const Tensor& w,
                                         const LinearSoftmaxCrossEntropyOptions& options) {
  return run(x, labels, w, options, false).at("loss");
}

LinearSoftmaxCrossEntropyWithResiduals linear_softmax_cross_entropy_loss_with_residuals(
    const Tensor& x, const Tensor& labels, const Tensor& w,
    const LinearSoftmaxCrossEntropyOptions& options) {
  TensorMap outputs = run(x, labels, w, options, true);
  return {outputs.at("loss"), outputs.at("lse")};
}

}  // namespace tokamax
