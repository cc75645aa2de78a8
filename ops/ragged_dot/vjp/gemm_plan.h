// ragged_dot_vjp as plain GEMM calls: the per-group vendor loop of a GPU baseline (cuBLAS),
// written out on the host so that its index math is tested without a device
// (tests/ops/ragged_dot/vjp/gemm_plan_test.cc runs the plan with a CPU GEMM against the
// reference).
//
// Dimensions: as base.h (G, M, K, N); m_g, s_g the rows and first row of group g.
//
// Per non-empty group g (with N > 0), two row-major products:
//   dlhs[s_g : s_g + m_g, :] [m_g, K] = dout_g [m_g, N] x rhs[g]^T     (rhs[g] stored [K, N])
//   drhs[g]                  [K, N]   = lhs_g^T [K, m_g] x dout_g      (lhs_g stored [m_g, K])
// and zero fills for what no product writes: the dlhs rows outside [first_row, rows) (and all
// of them when N = 0: an empty sum), drhs[g] of an empty group (and every group when N = 0).
// Nothing is planned when K = 0 (dlhs and drhs are then empty) except dlhs's zero rows.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/ragged_dot/vjp/base.h"

namespace tokamax {

enum class RaggedDotVjpTensor { kLhs, kRhs, kDout, kDlhs, kDrhs };
// "lhs", "rhs", "dout" (inputs), "dlhs", "drhs" (outputs): the op's tensor names.
const char* ragged_dot_vjp_tensor_name(RaggedDotVjpTensor tensor);
inline bool is_output(RaggedDotVjpTensor tensor) {
  return tensor == RaggedDotVjpTensor::kDlhs || tensor == RaggedDotVjpTensor::kDrhs;
}

// C[m, n] = op(A) op(B), row-major, offsets and leading dimensions in elements of their tensor:
// A stored [m, k] with row stride lda (a_transposed: stored [k, m], op(A) its transpose), B
// stored [k, n] with row stride ldb (b_transposed: stored [n, k]), C [m, n] with row stride ldc.
struct RaggedDotVjpGemm {
  int64_t m = 0, n = 0, k = 0;
  RaggedDotVjpTensor a = RaggedDotVjpTensor::kDout;
  int64_t a_offset = 0, lda = 0;
  bool a_transposed = false;
  RaggedDotVjpTensor b = RaggedDotVjpTensor::kRhs;
  int64_t b_offset = 0, ldb = 0;
  bool b_transposed = false;
  RaggedDotVjpTensor c = RaggedDotVjpTensor::kDlhs;
  int64_t c_offset = 0, ldc = 0;
};

// `count` elements of an output from `offset` on set to zero.
struct RaggedDotVjpZeros {
  RaggedDotVjpTensor tensor = RaggedDotVjpTensor::kDlhs;
  int64_t offset = 0, count = 0;
};

struct RaggedDotVjpGemmPlan {
  std::vector<RaggedDotVjpZeros> zeros;  // first, then the products (they write disjoint parts)
  std::vector<RaggedDotVjpGemm> gemms;
};

RaggedDotVjpGemmPlan ragged_dot_vjp_gemm_plan(const RaggedDotVjpProblem& problem);

}  // namespace tokamax
