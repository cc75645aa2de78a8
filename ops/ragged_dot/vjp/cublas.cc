// ragged_dot_vjp: the cuBLAS baseline ("cublas") on a CUDA device, the per-group vendor loop a
// user would write: two cublasGemmEx calls per non-empty group and cudaMemsetAsync for what no
// product writes, in the order of ragged_dot_vjp_gemm_plan (gemm_plan.h, whose index math
// is tested on the CPU). The group sizes are the problem's (the catalog's, known on the host as
// for the onednn baseline), so no device-to-host copy is timed.
//
// Dimensions: as base.h (G, M, K, N).
#include <climits>
#include <string>

#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/cuda_vendor.h"
#include "ops/ragged_dot/vjp/base.h"
#include "ops/ragged_dot/vjp/gemm_plan.h"
#include "ops/ragged_dot/vjp/precision.h"

#if TOKAMAX_WITH_CUDA
#include "backends/cuda/cublas.h"
#include "backends/cuda/cuda_device.h"
#endif

namespace tokamax {
namespace {

class CublasRaggedDotVjp final : public TypedImplementation<RaggedDotVjpProblem> {
 public:
  std::string_view name() const override { return "cublas"; }
  std::string_view backend() const override { return "cuda"; }
  bool is_vendor() const override { return true; }
  nlohmann::json describe() const override {
    return cublas_describe("cublasGemmEx twice per group");
  }

  Support supported_on(const Device& device) const override {
    return cublas_support(Implementation::supported_on(device));
  }

  void check(const RaggedDotVjpProblem& vp, const Device&) const override {
    if (vjp_precision_rounds(vp)) {
      throw NotImplemented("cublas: precision=" + std::string(precision_name(vp.fwd.precision)) +
                           "; the baseline multiplies the operands as given");
    }
    const RaggedDotProblem& p = vp.fwd;
    const DType in = p.lhs_dtype;
    if (p.rhs_dtype != in || vp.dout_dtype != in) {
      throw NotImplemented("cublas: lhs " + std::string(dtype_name(in)) + ", rhs " +
                           std::string(dtype_name(p.rhs_dtype)) + ", dout " +
                           std::string(dtype_name(vp.dout_dtype)) +
                           "; the baseline wires one dtype for all three");
    }
    if (in != DType::kF32 && in != DType::kBF16 && in != DType::kF16) {
      throw NotImplemented("cublas: " + std::string(dtype_name(in)) +
                           " operands; the baseline wires f32, bf16 and f16");
    }
    if (p.M > INT_MAX || p.K > INT_MAX || p.N > INT_MAX) {
      throw NotImplemented("cublas: extents past cuBLAS's 32-bit integers");
    }
  }

  void run(const RaggedDotVjpProblem& vp, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(vp, device);
#if TOKAMAX_WITH_CUDA
    const RaggedDotVjpGemmPlan plan = ragged_dot_vjp_gemm_plan(vp);
    const size_t size = dtype_size(vp.fwd.lhs_dtype);
    // Every tensor has the one dtype (check), so an offset in elements is offset * size bytes.
    auto at = [&](RaggedDotVjpTensor t, int64_t offset) {
      const char* name = ragged_dot_vjp_tensor_name(t);
      char* base = is_output(t) ? static_cast<char*>(outputs.at(name).raw())
                                : static_cast<char*>(const_cast<void*>(inputs.at(name).raw()));
      return base + offset * static_cast<int64_t>(size);
    };
    for (const RaggedDotVjpZeros& z : plan.zeros) {
      cuda::memset_async(device, at(z.tensor, z.offset), static_cast<size_t>(z.count) * size);
    }
    const cuda::Element element = cuda_element(vp.fwd.lhs_dtype);
    try {
      for (const RaggedDotVjpGemm& g : plan.gemms) {
        cuda::gemm(device, element, element, static_cast<int>(g.m), static_cast<int>(g.n),
                   static_cast<int>(g.k), at(g.a, g.a_offset), static_cast<int>(g.lda),
                   at(g.b, g.b_offset), static_cast<int>(g.ldb), at(g.c, g.c_offset),
                   static_cast<int>(g.ldc), g.a_transposed, g.b_transposed);
      }
    } catch (const cuda::CublasNotSupported& e) {
      throw NotImplemented(std::string("cublas: ") + e.what());
    }
#else
    (void)inputs;
    (void)outputs;
    (void)device;
    throw NotImplemented("cublas: this build has no CUDA backend");
#endif
  }
};

}  // namespace

const Implementation& ragged_dot_vjp_cublas_implementation() {
  static const CublasRaggedDotVjp impl;
  return impl;
}

}  // namespace tokamax
