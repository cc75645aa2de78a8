// ragged_dot_vjp: high-level API and the dispatch order of its implementations.
#include "ops/ragged_dot/vjp/api.h"

#include <vector>

#include "ops/framework/dispatch.h"
#include "ops/ragged_dot/api.h"

namespace tokamax {

// Defined in the vjp_* implementation files of this folder.
const Implementation& ragged_dot_vjp_cpu_implementation();
const Implementation& ragged_dot_vjp_reference_implementation();
const Implementation& ragged_dot_vjp_onednn_implementation();
const Implementation& ragged_dot_vjp_cublas_implementation();

// Fastest first; the vendor baselines after the reference, so "auto" never picks them.
template <>
std::vector<const Implementation*> ProblemOp<RaggedDotVjpProblem>::implementations() const {
  return {&ragged_dot_vjp_cpu_implementation(), &ragged_dot_vjp_reference_implementation(),
          &ragged_dot_vjp_onednn_implementation(), &ragged_dot_vjp_cublas_implementation()};
}

const RaggedDotVjpOp& ragged_dot_vjp_op() {
  static const RaggedDotVjpOp op;
  return op;
}

RaggedDotGradients ragged_dot_vjp(const Tensor& lhs, const Tensor& rhs, const Tensor& group_sizes,
                                  const Tensor& dout, const RaggedDotVjpOptions& options) {
  ApiCall call(ragged_dot_vjp_op());
  add_ragged_dot_arguments(call, RaggedDotVjpProblem::kOp, lhs, rhs, group_sizes,
                           options.preferred_element_type, options.group_offset);
  call.tensor("dout", dout);
  TensorMap outputs = call.run(options.implementation, options.config);
  return {outputs.at("dlhs"), outputs.at("drhs")};
}

}  // namespace tokamax
