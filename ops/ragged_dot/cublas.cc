// ragged_dot: the cuBLAS baselines on a CUDA device. "cublas" calls cublasGemmEx once per
// non-empty group (the usual MoE fallback); "cublas_grouped" makes one
// cublasGemmGroupedBatchedEx call over the groups. Both need the group sizes on the host: the
// device-to-host copy (and its synchronization) is part of every timed call, as it is for a user
// of these APIs.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   m_g    rows of group g
#include <climits>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/framework/op.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/cuda_vendor.h"

#if TOKAMAX_WITH_CUDA
#include "backends/cuda/cublas.h"
#include "backends/cuda/cuda_device.h"
#endif

namespace tokamax {
namespace {

class CublasRaggedDot final : public TypedImplementation<RaggedDotProblem> {
 public:
  explicit CublasRaggedDot(bool grouped) : grouped_(grouped) {}
  std::string_view name() const override { return grouped_ ? "cublas_grouped" : "cublas"; }
  std::string_view backend() const override { return "cuda"; }
  bool is_vendor() const override { return true; }
  nlohmann::json describe() const override {
    return cublas_describe(grouped_ ? "cublasGemmGroupedBatchedEx" : "cublasGemmEx per group");
  }

  Support supported_on(const Device& device) const override {
    return cublas_support(Implementation::supported_on(device));
  }

  void check(const RaggedDotProblem& p, const Device&) const override {
    require_plain_ragged_dot(p, name());
    const std::string lhs(dtype_name(p.lhs_dtype)), out(dtype_name(p.out_dtype));
    if (p.lhs_dtype != p.rhs_dtype) {
      throw NotImplemented(std::string(name()) + ": lhs is " + lhs + " but rhs is " +
                           std::string(dtype_name(p.rhs_dtype)) + "; cuBLAS takes one input type");
    }
    const bool half = p.lhs_dtype == DType::kBF16 || p.lhs_dtype == DType::kF16;
    const bool ok = half ? (p.out_dtype == p.lhs_dtype || p.out_dtype == DType::kF32)
                         : (p.lhs_dtype == DType::kF32 && p.out_dtype == DType::kF32);
    if (!ok) {
      throw NotImplemented(std::string(name()) + ": " + lhs + " inputs with a " + out +
                           " output; the baseline wires bf16/f16 -> same or f32, and f32 -> f32");
    }
    // cublasGemmGroupedBatchedEx's documented type table has one type for A, B and C (with f32
    // compute): a 16-bit product with an f32 output is not among them.
    if (grouped_ && half && p.out_dtype != p.lhs_dtype) {
      throw NotImplemented(std::string(name()) + ": " + lhs + " inputs with an " + out +
                           " output; cublasGemmGroupedBatchedEx takes one type for A, B and C "
                           "(cublas, one gemm per group, has this one)");
    }
    if (p.M > INT_MAX || p.K > INT_MAX || p.N > INT_MAX) {
      throw NotImplemented(std::string(name()) + ": extents past cuBLAS's 32-bit integers");
    }
  }

  void run(const RaggedDotProblem& p, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
#if TOKAMAX_WITH_CUDA
    const size_t in_bytes = dtype_size(p.lhs_dtype), out_bytes = dtype_size(p.out_dtype);
    const char* lhs = static_cast<const char*>(inputs.at("lhs").raw());
    const char* rhs = static_cast<const char*>(inputs.at("rhs").raw());
    char* out = static_cast<char*>(outputs.at("out").raw());
    std::vector<int32_t> sizes(static_cast<size_t>(p.G));
    cuda::copy_to_host(device, sizes.data(), inputs.at("group_sizes").raw(),
                       sizes.size() * sizeof(int32_t));
    int64_t rows = 0;
    std::vector<cuda::GemmGroup> groups;
    for (int64_t g = 0; g < p.G; ++g) {
      const int64_t m_g = sizes[g];
      groups.push_back({static_cast<int>(m_g), lhs + rows * p.K * in_bytes,
                        rhs + g * p.K * p.N * in_bytes, out + rows * p.N * out_bytes});
      rows += m_g;
    }
    // Rows past the group sum are zero; with K = 0 every row is an empty sum (all-zero bits are
    // +0 in every output dtype).
    const int64_t first_zero_row = p.K == 0 ? 0 : rows;
    cuda::memset_async(device, out + first_zero_row * p.N * out_bytes,
                       static_cast<size_t>((p.M - first_zero_row) * p.N) * out_bytes);
    if (p.K == 0 || p.N == 0) return;
    const cuda::Element in = cuda_element(p.lhs_dtype), o = cuda_element(p.out_dtype);
    const int N = static_cast<int>(p.N), K = static_cast<int>(p.K);
    try {
      if (grouped_) {
        cuda::grouped_gemm(device, in, o, N, K, groups);
        return;
      }
      for (const cuda::GemmGroup& g : groups) {
        if (g.m > 0) cuda::gemm(device, in, o, g.m, N, K, g.a, K, g.b, N, g.c, N);
      }
    } catch (const cuda::CublasNotSupported& e) {
      throw NotImplemented(std::string(name()) + ": " + e.what());
    }
#else
    (void)inputs;
    (void)outputs;
    throw NotImplemented(std::string(name()) + ": this build has no CUDA backend");
#endif
  }

 private:
  bool grouped_;
};

}  // namespace

const Implementation& ragged_dot_cublas_implementation() {
  static const CublasRaggedDot impl(/*grouped=*/false);
  return impl;
}

const Implementation& ragged_dot_cublas_grouped_implementation() {
  static const CublasRaggedDot impl(/*grouped=*/true);
  return impl;
}

}  // namespace tokamax
