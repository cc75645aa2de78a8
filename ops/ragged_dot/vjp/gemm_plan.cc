// ragged_dot_vjp as plain GEMM calls (gemm_plan.h).
//
// Dimensions: as gemm_plan.h.
#include "ops/ragged_dot/vjp/gemm_plan.h"

namespace tokamax {

const char* ragged_dot_vjp_tensor_name(RaggedDotVjpTensor tensor) {
  switch (tensor) {
    case RaggedDotVjpTensor::kLhs:
      return "lhs";
    case RaggedDotVjpTensor::kRhs:
      return "rhs";
    case RaggedDotVjpTensor::kDout:
      return "dout";
    case RaggedDotVjpTensor::kDlhs:
      return "dlhs";
    case RaggedDotVjpTensor::kDrhs:
      return "drhs";
  }
  return "";
}

RaggedDotVjpGemmPlan ragged_dot_vjp_gemm_plan(const RaggedDotVjpProblem& vp) {
  const RaggedDotProblem& p = vp.fwd;
  const int64_t M = p.M, K = p.K, N = p.N;
  RaggedDotVjpGemmPlan plan;
  auto zero = [&](RaggedDotVjpTensor tensor, int64_t offset, int64_t count) {
    if (count > 0) plan.zeros.push_back({tensor, offset, count});
  };
  // dlhs rows without a forward output (all of them when N = 0: an empty sum).
  const int64_t first = N == 0 ? p.rows() : p.first_row();
  zero(RaggedDotVjpTensor::kDlhs, 0, first * K);
  zero(RaggedDotVjpTensor::kDlhs, p.rows() * K, (M - p.rows()) * K);
  if (K == 0) return plan;
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t m_g = p.group_sizes[g], s_g = p.group_starts[g];
    if (m_g == 0 || N == 0) {
      zero(RaggedDotVjpTensor::kDrhs, g * K * N, K * N);
      continue;
    }
    using T = RaggedDotVjpTensor;
    // dlhs rows of g [m_g, K] = dout_g [m_g, N] x rhs[g]^T, rhs[g] stored [K, N].
    plan.gemms.push_back({.m = m_g,
                          .n = K,
                          .k = N,
                          .a = T::kDout,
                          .a_offset = s_g * N,
                          .lda = N,
                          .b = T::kRhs,
                          .b_offset = g * K * N,
                          .ldb = N,
                          .b_transposed = true,
                          .c = T::kDlhs,
                          .c_offset = s_g * K,
                          .ldc = K});
    // drhs[g] [K, N] = lhs_g^T [K, m_g] x dout_g [m_g, N], lhs_g stored [m_g, K].
    plan.gemms.push_back({.m = K,
                          .n = N,
                          .k = m_g,
                          .a = T::kLhs,
                          .a_offset = s_g * K,
                          .lda = K,
                          .a_transposed = true,
                          .b = T::kDout,
                          .b_offset = s_g * N,
                          .ldb = N,
                          .c = T::kDrhs,
                          .c_offset = g * K * N,
                          .ldc = N});
  }
  return plan;
}

}  // namespace tokamax
