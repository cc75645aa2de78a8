// ragged_dot on CUDA: the index math of the device setup kernel, in __host__ __device__ code
// without CUDA headers, so that the CPU tests check it against a brute-force model.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   m_g    rows of group g; start_g = sum of the sizes before g
//
// The setup kernel turns group_sizes (device memory) into the tables CUTLASS's grouped GEMM
// reads: one (m_g, N, K) problem per group and the element offsets of its operands in lhs, rhs
// and out. Empty groups stay in the tables with m_g = 0: the grouped tile scheduler gives them no
// tile, so the group count is G on the host without a device-to-host copy. K = 0 never reaches
// the kernel (the host zeroes the output instead: TMA descriptors reject a zero extent).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TOKAMAX_HD __host__ __device__
#else
#define TOKAMAX_HD
#endif

namespace tokamax::ragged_cuda {

// One group's GEMM: out[start_g : start_g + m_g, :] = lhs[start_g : start_g + m_g, :] @ rhs[g].
struct GroupProblem {
  int m = 0, n = 0, k = 0;
  int64_t lhs_offset = 0;  // elements: start_g * K
  int64_t rhs_offset = 0;  // g * K * N
  int64_t out_offset = 0;  // start_g * N
};

// Group g of sizes starting at row `start`. A size that would run past M (or is negative) is cut
// to the rows left, so a bad group_sizes tensor can never make the kernel write outside `out`.
TOKAMAX_HD inline GroupProblem group_problem(int g, int64_t start, int32_t size, int64_t M, int K,
                                             int N) {
  const int64_t left = M - start;
  const int64_t m = size < 0 ? 0 : (size > left ? (left < 0 ? 0 : left) : size);
  GroupProblem p;
  p.m = static_cast<int>(m);
  p.n = N;
  p.k = K;
  p.lhs_offset = start * K;
  p.rhs_offset = static_cast<int64_t>(g) * K * N;
  p.out_offset = start * N;
  return p;
}

// The rows groups [0, g) cover, given the previous prefix and group g - 1's problem.
TOKAMAX_HD inline int64_t next_start(int64_t start, const GroupProblem& previous) {
  return start + previous.m;
}

// The output elements past the groups' rows, [rows * N, M * N), which the tail kernel zeroes:
// thread t of T (grid-stride) starts at rows * N + t and steps by T.
TOKAMAX_HD inline int64_t tail_begin(int64_t rows, int64_t N) { return rows * N; }
TOKAMAX_HD inline int64_t tail_end(int64_t M, int64_t N) { return M * N; }

}  // namespace tokamax::ragged_cuda
