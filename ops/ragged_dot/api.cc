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
template <>
std::vector<const Implementation*> ProblemOp<RaggedDotProblem>::implementations() const {
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

void add_ragged_dot_arguments(ApiCall& call, std::string_view op, const Tensor& lhs,
                              const Tensor& rhs, const Tensor& group_sizes,
                              std::optional<DType> preferred_element_type,
                              std::optional<int64_t> group_offset) {
  if (group_sizes.dtype() != DType::kI32 || group_sizes.spec().rank() != 1) {
    throw InvalidArgument(
        std::string(op) + ": group_sizes must be i32[G], got " + group_sizes.spec().to_string(),
        "group_sizes");
  }
  // The sizes are values of the binding (they decide the work); the tensor is an input too.
  const int32_t* sizes = group_sizes.data<int32_t>();
  call.tensor("lhs", lhs).tensor("rhs", rhs).input("group_sizes", group_sizes);
  call.option("group_sizes", std::vector<int64_t>(sizes, sizes + group_sizes.num_elements()));
  if (preferred_element_type) {
    call.option("preferred_element_type", std::string(dtype_name(*preferred_element_type)));
  }
  call.option("group_offset", group_offset);
}

Tensor ragged_dot(const Tensor& lhs, const Tensor& rhs, const Tensor& group_sizes,
                  const RaggedDotOptions& options) {
  ApiCall call(ragged_dot_op());
  add_ragged_dot_arguments(call, RaggedDotProblem::kOp, lhs, rhs, group_sizes,
                           options.preferred_element_type, options.group_offset);
  call.tensor("rhs_bias", options.rhs_bias)
      .option("activation", std::string(activation_name(options.activation)))
      .option("fuse_gateup_activation",
              gate_up_spelling(options.fuse_gateup_activation, options.situ))
      .option("precision", std::string(precision_name(options.precision)));
  return call.run(options.implementation, options.config).at("out");
}

Tensor ragged_dot_general(const Tensor& lhs, const Tensor& rhs, const Tensor& group_sizes,
                          RaggedDims dimension_numbers, const RaggedDotOptions& options) {
  if (dimension_numbers == RaggedDims::kDefault) return ragged_dot(lhs, rhs, group_sizes, options);
  ApiCall call(ragged_dot_op());
  add_ragged_dot_arguments(call, RaggedDotProblem::kOp, lhs, rhs, group_sizes,
                           options.preferred_element_type, options.group_offset);
  call.tensor("rhs_bias", options.rhs_bias)
      .option("ragged_dot_dimension_numbers", std::string(ragged_dims_name(dimension_numbers)));
  if (options.activation != Activation::kNone) {
    call.option("activation", std::string(activation_name(options.activation)));
  }
  if (options.fuse_gateup_activation != GateUp::kNone) {
    call.option("fuse_gateup_activation",
                gate_up_spelling(options.fuse_gateup_activation, options.situ));
  }
  if (options.precision != DotPrecision::kDefault) {
    call.option("precision", std::string(precision_name(options.precision)));
  }
  return call.run(options.implementation, options.config).at("out");
}

}  // namespace tokamax
