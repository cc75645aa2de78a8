// ragged_dot on CUDA: the kernel that zeroes the output rows past the groups, whose count the
// setup kernels leave in device memory (no device-to-host copy). Shared by the CUTLASS kernels
// (cuda_grouped_gemm.cuh) and the cuDNN baseline (cudnn_kernel.cu).
#pragma once

#include <cstdint>

#include "ops/ragged_dot/cuda_setup.h"

namespace tokamax::ragged_cuda {

// out[rows * N, M * N) = 0: the rows past the groups. A grid-stride loop from the first such
// element, so only they are touched.
template <class ElementOut>
__global__ void zero_tail(const int64_t* rows, int64_t M, int N, ElementOut* out) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t end = tail_end(M, N);
  for (int64_t i = tail_begin(*rows, N) + int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < end;
       i += stride) {
    out[i] = ElementOut(0);
  }
}

}  // namespace tokamax::ragged_cuda
