// ragged_dot: the BLAS baselines' shared checks and per-group loop.
#include "ops/ragged_dot/blas_groups.h"

#include <climits>
#include <cstring>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_checks.h"
#include "ops/framework/errors.h"

namespace tokamax {

std::vector<BlasRaggedDotConfig> blas_autotuning_configs(const Device& device) {
  if (cpu::cpu_info(device).cores <= 1) return {{0}};
  return {{0}, {1}};
}

void check_blas_ragged_dot(const RaggedDotProblem& p, const std::string& library, bool has_bf16,
                           const std::string& no_bf16_why) {
  require_plain_ragged_dot(p, library);
  const std::string lhs(dtype_name(p.lhs_dtype)), rhs(dtype_name(p.rhs_dtype));
  const std::string out(dtype_name(p.out_dtype));
  if (p.lhs_dtype != p.rhs_dtype) {
    throw NotImplemented(library + ": lhs is " + lhs + " but rhs is " + rhs +
                         "; BLAS gemm takes one input dtype");
  }
  if (p.lhs_dtype != DType::kF32 && p.lhs_dtype != DType::kBF16) {
    throw NotImplemented(library + ": " + lhs +
                         " inputs; the baseline wires only the f32 and bf16 gemms, the dtypes "
                         "whose speed matters");
  }
  if (p.lhs_dtype == DType::kBF16 && !has_bf16) throw NotImplemented(library + ": " + no_bf16_why);
  if (p.out_dtype != DType::kF32) {
    throw NotImplemented(library + ": " + lhs + " inputs with a " + out +
                         " output; its gemm writes f32 only");
  }
  // The integers are 32-bit in LP64 builds: extents and leading dimensions must fit.
  if (p.M > INT_MAX || p.K > INT_MAX || p.N > INT_MAX) {
    throw NotImplemented(library + ": M=" + std::to_string(p.M) + ", K=" + std::to_string(p.K) +
                         ", N=" + std::to_string(p.N) + " exceed the 32-bit BLAS integer");
  }
}

void run_blas_ragged_dot(const RaggedDotProblem& p, const BlasGemms& gemms, const Tensor& lhs,
                         const Tensor& rhs, Tensor& out) {
  const int64_t K = p.K, N = p.N;
  float* out_data = out.data<float>();
  // Rows past the group sum are zero; with K = 0 every row is (an empty sum), and a zero
  // leading dimension is an error to BLAS, so no gemm runs at all.
  const int64_t first_zero_row = K == 0 ? 0 : p.rows();
  std::memset(out_data + first_zero_row * N, 0,
              static_cast<size_t>((p.M - first_zero_row) * N) * sizeof(float));
  if (K == 0 || N == 0) return;
  const int k = static_cast<int>(K), n = static_cast<int>(N);
  if (p.lhs_dtype == DType::kF32 && gemms.f32_grouped) {
    std::vector<BlasF32Group> groups;
    for (int64_t g = 0; g < p.G; ++g) {
      const int64_t m_g = p.group_sizes[g], row0 = p.group_starts[g];
      if (m_g == 0) continue;
      groups.push_back({static_cast<int>(m_g), lhs.data<float>() + row0 * K,
                        rhs.data<float>() + g * K * N, out_data + row0 * N});
    }
    if (!groups.empty()) gemms.f32_grouped(n, k, groups);
    return;
  }
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t m_g = p.group_sizes[g], row0 = p.group_starts[g];
    if (m_g == 0) continue;
    float* out_g = out_data + row0 * N;  // [m_g, N]
    if (p.lhs_dtype == DType::kF32) {
      gemms.f32(static_cast<int>(m_g), n, k, lhs.data<float>() + row0 * K, k,
                rhs.data<float>() + g * K * N, n, out_g, n);
    } else {
      // bf16 storage is the raw 16 bits, exactly what the libraries' bfloat16 is.
      gemms.bf16(static_cast<int>(m_g), n, k,
                 reinterpret_cast<const uint16_t*>(lhs.data<bf16>() + row0 * K), k,
                 reinterpret_cast<const uint16_t*>(rhs.data<bf16>() + g * K * N), n, out_g, n);
    }
  }
}

}  // namespace tokamax
