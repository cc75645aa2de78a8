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
std::vector<const Implementation*> LinearSoftmaxCrossEntropyLossVjpOp::implementations() const {
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
  const LinearSoftmaxCrossEntropyLossVjpOp& op = linear_softmax_cross_entropy_loss_vjp_op();
  nlohmann::json args = {{"x", x.spec().to_string()},
                         {"labels", labels.spec().to_string()},
                         {"w", w.spec().to_string()},
                         {"reduction", std::string(lsce_reduction_name(options.reduction))},
                         {"dloss", dloss.spec().to_string()}};
  if (lse != nullptr) args["lse"] = lse->spec().to_string();
  const BoundArgs bound = op.bind(args);
  TensorMap inputs;
  inputs.emplace("x", x);
  inputs.emplace("labels", labels);
  inputs.emplace("w", w);
  inputs.emplace("dloss", dloss);
  if (lse != nullptr) inputs.emplace("lse", *lse);
  TensorMap outputs = op.allocate_outputs(bound);
  dispatch(op, bound, options.implementation, options.config, inputs, outputs);
  return {outputs.at("dx"), outputs.at("dw")};
}

}  // namespace tokamax
