// ragged_dot: the cuDNN baseline on a CUDA device ("cudnn"): cuDNN's MoE grouped matmul (mode
// NONE, tokens already sorted by group), which reads each group's first row from the device, so
// no call copies group_sizes to the host. Where the loaded cuDNN has no execution plan for the
// device, the dtypes or the shape, the case is unsupported with cuDNN's reason.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
#include <climits>
#include <mutex>
#include <string>

#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/cuda_vendor.h"

#if TOKAMAX_WITH_CUDA
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cudnn.h"
#include "ops/ragged_dot/cudnn_kernel.h"
#endif

namespace tokamax {
namespace {

class CudnnRaggedDot final : public TypedImplementation<RaggedDotProblem> {
 public:
  std::string_view name() const override { return "cudnn"; }
  std::string_view backend() const override { return "cuda"; }
  bool is_vendor() const override { return true; }
  nlohmann::json describe() const override {
#if TOKAMAX_WITH_CUDA
    return {{"library", "cuDNN"},
            {"description", cuda::cudnn_description()},
            { "call",
              "MoE grouped matmul (cudnn-frontend graph, mode NONE)" }};
#else
    return {{"library", "cuDNN"}};
#endif
  }

  Support supported_on(const Device& device) const override {
    Support support = Implementation::supported_on(device);
#if TOKAMAX_WITH_CUDA
    if (support.ok && !cuda::cudnn_unavailable().empty()) return {false, cuda::cudnn_unavailable()};
#endif
    return support;
  }

  void check(const RaggedDotProblem& p, const Device& device) const override {
    require_plain_ragged_dot(p, name());
    const std::string in(dtype_name(p.lhs_dtype)), out(dtype_name(p.out_dtype));
    const bool half = p.lhs_dtype == DType::kBF16 || p.lhs_dtype == DType::kF16;
    if (!half || p.rhs_dtype != p.lhs_dtype) {
      throw NotImplemented("cudnn: " + in + " x " + std::string(dtype_name(p.rhs_dtype)) +
                           " inputs; the baseline wires bf16 x bf16 and f16 x f16");
    }
    if (p.out_dtype != p.lhs_dtype && p.out_dtype != DType::kF32) {
      throw NotImplemented("cudnn: " + in + " inputs with a " + out + " output; expected " + in +
                           " or f32");
    }
    if (p.M > INT_MAX || p.G > INT_MAX) {
      throw NotImplemented("cudnn: M or G past the 32-bit first-row table");
    }
#if TOKAMAX_WITH_CUDA
    // Empty problems never reach cuDNN (run() writes the zeros itself).
    if (p.G == 0 || p.M == 0 || p.K == 0 || p.N == 0) return;
    const std::string why = cuda::moe_plan_error(device, shape(p));
    if (!why.empty()) throw NotImplemented("cudnn: " + why);
#else
    (void)device;
#endif
  }

  void run(const RaggedDotProblem& p, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
#if TOKAMAX_WITH_CUDA
    Tensor& out = outputs.at("out");
    if (p.M == 0 || p.N == 0) return;
    if (p.G == 0 || p.K == 0) {  // no group, or every row an empty sum
      cuda::memset_async(device, out.raw(), out.size_bytes());
      return;
    }
    const cuda::MoeMatmul s = shape(p);
    const size_t table_bytes = (static_cast<size_t>(p.G) * sizeof(int32_t) + 255) / 256 * 256;
    const std::lock_guard<std::mutex> lock(cuda::scratch_mutex(device));
    char* scratch = static_cast<char*>(cuda::scratch(
        device, table_bytes + 256 + static_cast<size_t>(cuda::moe_workspace_bytes(device, s))));
    CudnnRaggedDotPrep prep;
    prep.G = static_cast<int>(p.G);
    prep.M = p.M;
    prep.N = static_cast<int>(p.N);
    prep.group_sizes = static_cast<const int32_t*>(inputs.at("group_sizes").raw());
    prep.first_row = reinterpret_cast<int32_t*>(scratch);
    prep.rows = reinterpret_cast<int64_t*>(scratch + table_bytes);
    prep.out = out.raw();
    prep.out_bytes = static_cast<int>(dtype_size(p.out_dtype));
    prep.sm_count = device.info().properties.value("sm_count", 1);
    prep.stream = cuda::stream(device);
    ragged_dot_cudnn_offsets(prep);
    cuda::moe_grouped_matmul(device, s, inputs.at("lhs").raw(), inputs.at("rhs").raw(),
                             prep.first_row, out.raw(), scratch + table_bytes + 256);
    // cuDNN's last group runs to row M; the rows past sum(group_sizes) are zero.
    ragged_dot_cudnn_zero_tail(prep);
#else
    (void)inputs;
    (void)outputs;
    throw NotImplemented("cudnn: this build has no CUDA backend");
#endif
  }

 private:
#if TOKAMAX_WITH_CUDA
  static cuda::MoeMatmul shape(const RaggedDotProblem& p) {
    cuda::MoeMatmul s;
    s.in = cuda_element(p.lhs_dtype);
    s.out = cuda_element(p.out_dtype);
    s.E = p.G;
    s.T = p.M;
    s.K = p.K;
    s.N = p.N;
    return s;
  }
#endif
};

}  // namespace

const Implementation& ragged_dot_cudnn_implementation() {
  static const CudnnRaggedDot impl;
  return impl;
}

}  // namespace tokamax
