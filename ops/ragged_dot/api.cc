// ragged_dot: high-level API and the dispatch order of its implementations.
#include "ops/ragged_dot/api.h"

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& ragged_dot_cuda_implementation();
const Implementation& ragged_dot_cpu_implementation();
const Implementation& ragged_dot_reference_implementation();
const Implementation& ragged_dot_openblas_implementation();
const Implementation& ragged_dot_onednn_implementation();
const Implementation& ragged_dot_mkl_implementation();
const Implementation& ragged_dot_cublas_implementation();
const Implementation& ragged_dot_cublas_grouped_implementation();
const Implementation& ragged_dot_cudnn_implementation();

// The dispatch order lives with the API: fastest first, "auto" takes the first implementation
// that is supported on the device and accepts the args (cuda on a CUDA device, cpu on the host).
// The vendor baselines come last, after the reference (which accepts every valid args), so "auto"
// never picks one over ours; they are listed for bench, verify and tune to run side by side.
std::vector<const Implementation*> RaggedDotOp::implementations() const {
  return {&ragged_dot_cuda_implementation(),      &ragged_dot_cpu_implementation(),
          &ragged_dot_reference_implementation(), &ragged_dot_openblas_implementation(),
          &ragged_dot_onednn_implementation(),    &ragged_dot_mkl_implementation(),
          &ragged_dot_cublas_implementation(),    &ragged_dot_cublas_grouped_implementation(),
          &ragged_dot_cudnn_implementation()};
}

const RaggedDotOp& ragged_dot_op() {
  static const RaggedDotOp op;
  return op;
}

Tensor ragged_dot(const Tensor& lhs, const Tensor& rhs, const Tensor& group_sizes,
                  const RaggedDotOptions& options) {
  if (group_sizes.dtype() != DType::kI32 || group_sizes.spec().rank() != 1) {
    throw InvalidArgument(
        "ragged_dot: group_sizes must be i32[G], got " + group_sizes.spec().to_string(),
        "group_sizes");
  }
  nlohmann::json args = {{"lhs", lhs.spec().to_string()}, {"rhs", rhs.spec().to_string()}};
  std::vector<int64_t> sizes(group_sizes.data<int32_t>(),
                             group_sizes.data<int32_t>() + group_sizes.num_elements());
  args["group_sizes"] = sizes;
  if (options.preferred_element_type) {
    args["preferred_element_type"] = std::string(dtype_name(*options.preferred_element_type));
  }
  if (options.group_offset) args["group_offset"] = *options.group_offset;
  if (options.rhs_bias != nullptr) args["rhs_bias"] = options.rhs_bias->spec().to_string();
  args["activation"] = std::string(activation_name(options.activation));
  args["fuse_gateup_activation"] = std::string(gate_up_name(options.fuse_gateup_activation));
  args["precision"] = std::string(precision_name(options.precision));
  const RaggedDotOp& op = ragged_dot_op();
  const BoundArgs bound = op.bind(args);
  TensorMap inputs;
  inputs.emplace("lhs", lhs);
  inputs.emplace("rhs", rhs);
  inputs.emplace("group_sizes", group_sizes);
  if (options.rhs_bias != nullptr) inputs.emplace("rhs_bias", *options.rhs_bias);
  TensorMap outputs = op.allocate_outputs(bound);
  dispatch(op, bound, options.implementation, options.config, inputs, outputs);
  return outputs.at("out");
}

}  // namespace tokamax
