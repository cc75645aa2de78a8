// ragged_dot: what the BLAS baselines (openblas, mkl) share: one row-major gemm per non-empty
// group, f32 or bf16 inputs into an f32 output.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   m_g    rows of group g
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backends/device.h"
#include "ops/framework/config.h"
#include "ops/framework/tensor.h"
#include "ops/ragged_dot/base.h"

namespace tokamax {

// The config of a BLAS baseline: the library's thread count, which is process-global (set before
// the calls, under the baseline's lock).
struct BlasRaggedDotConfig {
  int num_threads = 0;  // 0 = all cores

  void validate() const {
    require_config(num_threads >= 0, "num_threads", [&] {
      return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
    });
  }
  template <class V>
  void visit(V&& v) {
    v("num_threads", num_threads);
  }
};

// A vendor baseline runs as it ships (all cores); tune compares all cores with one (the same on
// a one-core machine).
std::vector<BlasRaggedDotConfig> blas_autotuning_configs(const Device& device);

// One group's f32 gemm for a library's grouped call: C[m, N] = A[m, K] B[K, N], row-major with
// leading dimensions K, N and N.
struct BlasF32Group {
  int m = 0;
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
};

// The gemms of one library, row-major, C = A B (alpha 1, beta 0): f32 and bf16 (raw bits) into
// f32. `bf16` may be empty (the library has none). `f32_grouped`, when set, runs every non-empty
// group of an f32 call in one library call (MKL's cblas_sgemm_batch) instead of `f32` per group.
struct BlasGemms {
  std::function<void(int M, int N, int K, const float* a, int lda, const float* b, int ldb,
                     float* c, int ldc)>
      f32;
  std::function<void(int M, int N, int K, const uint16_t* a, int lda, const uint16_t* b, int ldb,
                     float* c, int ldc)>
      bf16;
  std::function<void(int N, int K, const std::vector<BlasF32Group>& groups)> f32_grouped;
};

// NotImplemented unless `library` (the implementation's name) can run `p`: a plain ragged_dot,
// one input dtype, f32 (or bf16 with `has_bf16`) into an f32 output, extents within the 32-bit
// BLAS integer. `no_bf16_why` says why bf16 is missing.
void check_blas_ragged_dot(const RaggedDotProblem& p, const std::string& library, bool has_bf16,
                           const std::string& no_bf16_why);

// out[rows of group g] = lhs_g rhs[g] for every non-empty group; rows past the group sum (all of
// them with K = 0) are zero.
void run_blas_ragged_dot(const RaggedDotProblem& p, const BlasGemms& gemms, const Tensor& lhs,
                         const Tensor& rhs, Tensor& out);

}  // namespace tokamax
