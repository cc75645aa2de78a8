// linear_softmax_cross_entropy_loss_vjp: high-level API and the dispatch order of its
// implementations.
#include "ops/linear_softmax_cross_entropy_loss/vjp/api.h"

#include <vector>

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {

// Defined in the vjp_* implementation files of this folder.
const Implementation& linear_softmax_cross_entropy_loss_vjp_cpu_implementation();
const Implementation& linear_softmax_cross_entropy_loss_vjp_reference_implementation();
const Implementation& linear_softmax_cross_entropy_loss_vjp_onednn_implementation();

// Fastest first; the vendor composite after the reference (which accepts every valid args), so
// "auto" never picks it: it is listed for bench, verify and tune.
template <>
std::vector<const Implementation*> ProblemOp<LinearSoftmaxCrossEntropyVjpProblem>::implementations()
    const {
  return {&linear_softmax_cross_entropy_loss_vjp_cpu_implementation(),
          &linear_softmax_cross_entropy_loss_vjp_reference_implementation(),
          &linear_softmax_cross_entropy_loss_vjp_onednn_implementation()};
}

const LinearSoftmaxCrossEntropyLossVjpOp& linear_softmax_cross_entropy_loss_vjp_op() {
  static const LinearSoftmaxCrossEntropyLossVjpOp op;
  return op;
}

LinearSoftmaxCrossEntropyGradients linear_softmax_cross_entropy_loss_vjp(
    const Tensor& x, const Tensor& labels, const Tensor& w, const Tensor& dloss,
    const LinearSoftmaxCrossEntropyVjpOptions& options, const Tensor* lse) {
  ApiCall call(linear_softmax_cross_entropy_loss_vjp_op());
  call.tensor("x", x).tensor("labels", labels).tensor("w", w).tensor("dloss", dloss);
  call.tensor("lse", lse);
  call.option("reduction", std::string(lsce_reduction_name(options.reduction)));
  TensorMap outputs = call.run(options.implementation, options.config);
  return {outputs.at("dx"), outputs.at("dw")};
}

}  // namespace tokamax
