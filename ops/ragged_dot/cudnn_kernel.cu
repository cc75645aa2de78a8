// ragged_dot's cuDNN baseline: the first-row table and the tail zeroing (cudnn_kernel.h).
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

#include "backends/cuda/cuda_check.h"
#include "ops/ragged_dot/cuda_setup.h"
#include "ops/ragged_dot/cuda_tail.cuh"
#include "ops/ragged_dot/cudnn_kernel.h"

namespace tokamax {
namespace {

// One thread: G is a few hundred at most and the prefix sum is sequential. The same cut as the
// CUTLASS setup kernel (group_problem): a size past the rows left, or negative, is clipped.
__global__ void first_rows(const int32_t* group_sizes, int G, int64_t M, int32_t* first_row,
                           int64_t* rows) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int64_t start = 0;
  for (int g = 0; g < G; ++g) {
    first_row[g] = static_cast<int32_t>(start);
    start = ragged_cuda::next_start(start, ragged_cuda::group_problem(g, start, group_sizes[g], M,
                                                                      /*K=*/0, /*N=*/0));
  }
  *rows = start;
}

}  // namespace

void ragged_dot_cudnn_offsets(const CudnnRaggedDotPrep& p) {
  first_rows<<<1, 32, 0, static_cast<cudaStream_t>(p.stream)>>>(p.group_sizes, p.G, p.M,
                                                                p.first_row, p.rows);
  cuda::check(cudaGetLastError(), "first_rows");
}

void ragged_dot_cudnn_zero_tail(const CudnnRaggedDotPrep& p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  // Zero bits are +0 in every output dtype: the tail is zeroed as raw 2- or 4-byte words.
  if (p.out_bytes == 2) {
    ragged_cuda::zero_tail<uint16_t>
        <<<p.sm_count * 4, 256, 0, stream>>>(p.rows, p.M, p.N, static_cast<uint16_t*>(p.out));
  } else if (p.out_bytes == 4) {
    ragged_cuda::zero_tail<uint32_t>
        <<<p.sm_count * 4, 256, 0, stream>>>(p.rows, p.M, p.N, static_cast<uint32_t*>(p.out));
  } else {
    throw std::invalid_argument("ragged_dot cudnn: output elements of 2 or 4 bytes");
  }
  cuda::check(cudaGetLastError(), "zero_tail");
}

}  // namespace tokamax
