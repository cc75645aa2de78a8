// ragged_dot_vjp as plain GEMM calls (vjp_gemm_plan.h).
//
// Dimensions: as vjp_gemm_plan.h.
#include "ops/ragged_dot/vjp_gemm_plan.h"

namespace tokamax {

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
    RaggedDotVjpGemm dlhs;  // dout_g [m_g, N] x rhs[g]^T, rhs[g] stored [K, N]
    dlhs.m = m_g;
    dlhs.n = K;
    dlhs.k = N;
    dlhs.a = RaggedDotVjpTensor::kDout;
    dlhs.a_offset = s_g * N;
    dlhs.lda = N;
    dlhs.b = RaggedDotVjpTensor::kRhs;
    dlhs.b_offset = g * K * N;
    dlhs.ldb = N;
    dlhs.b_transposed = true;
    dlhs.c = RaggedDotVjpTensor::kDlhs;
    dlhs.c_offset = s_g * K;
    dlhs.ldc = K;
    plan.gemms.push_back(dlhs);
    RaggedDotVjpGemm drhs;  // lhs_g^T [K, m_g] x dout_g [m_g, N], lhs_g stored [m_g, K]
    drhs.m = K;
    drhs.n = N;
    drhs.k = m_g;
    drhs.a = RaggedDotVjpTensor::kLhs;
    drhs.a_offset = s_g * K;
    drhs.lda = K;
    drhs.a_transposed = true;
    drhs.b = RaggedDotVjpTensor::kDout;
    drhs.b_offset = s_g * N;
    drhs.ldb = N;
    drhs.c = RaggedDotVjpTensor::kDrhs;
    drhs.c_offset = g * K * N;
    drhs.ldc = N;
    plan.gemms.push_back(drhs);
  }
  return plan;
}

}  // namespace tokamax
