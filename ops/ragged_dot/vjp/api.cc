// ragged_dot_vjp: high-level API and the dispatch order of its implementations.
#include "ops/ragged_dot/vjp/api.h"

#include <vector>

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {

// Defined in the vjp_* implementation files of this folder.
const Implementation& ragged_dot_vjp_cpu_implementation();
const Implementation& ragged_dot_vjp_reference_implementation();
const Implementation& ragged_dot_vjp_onednn_implementation();
const Implementation& ragged_dot_vjp_cublas_implementation();

// Fastest first; the vendor baselines after the reference, so "auto" never picks them.
std::vector<const Implementation*> RaggedDotVjpOp::implementations() const {
  return {&ragged_dot_vjp_cpu_implementation(), &ragged_dot_vjp_reference_implementation(),
          &ragged_dot_vjp_onednn_implementation(), &ragged_dot_vjp_cublas_implementation()};
}

const RaggedDotVjpOp& ragged_dot_vjp_op() {
  static const RaggedDotVjpOp op;
  return op;
}

RaggedDotGradients ragged_dot_vjp(const Tensor& lhs, const Tensor& rhs, const Tensor& group_sizes,
                                  const Tensor& dout, const RaggedDotVjpOptions& options) {
  if (group_sizes.dtype() != DType::kI32 || group_sizes.spec().rank() != 1) {
    throw InvalidArgument(
        "ragged_dot_vjp: group_sizes must be i32[G], got " + group_sizes.spec().to_string(),
        "group_sizes");
  }
  nlohmann::json args = {{"lhs", lhs.spec().to_string()},
                         {"rhs", rhs.spec().to_string()},
                         {"dout", dout.spec().to_string()}};
  args["group_sizes"] = std::vector<int64_t>(
      group_sizes.data<int32_t>(), group_sizes.data<int32_t>() + group_sizes.num_elements());
  if (options.preferred_element_type) {
    args["preferred_element_type"] = std::string(dtype_name(*options.preferred_element_type));
  }
  if (options.group_offset) args["group_offset"] = *options.group_offset;
  const RaggedDotVjpOp& op = ragged_dot_vjp_op();
  const BoundArgs bound = op.bind(args);
  TensorMap inputs;
  inputs.emplace("lhs", lhs);
  inputs.emplace("rhs", rhs);
  inputs.emplace("group_sizes", group_sizes);
  inputs.emplace("dout", dout);
  TensorMap outputs = op.allocate_outputs(bound);
  dispatch(op, bound, options.implementation, options.config, inputs, outputs);
  return {outputs.at("dlhs"), outputs.at("drhs")};
}

}  // namespace tokamax
