// ragged_dot's cuDNN baseline: the two small kernels around cuDNN's MoE grouped matmul, behind a
// plain C++ interface (no CUDA header). cuDNN reads each expert's first row from the device
// (FirstTokenOffset); the offsets are built there from group_sizes, so no call copies the sizes
// to the host. cuDNN's last expert runs to the end of the rows; the rows past the groups are
// zeroed after it.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens)
//   N      output features
//   rows   sum(group_sizes) <= M (sizes cut to M, as the CUTLASS kernels do)
#pragma once

#include <cstdint>

namespace tokamax {

struct CudnnRaggedDotPrep {
  int G = 0;
  int64_t M = 0;
  int N = 0;
  // Inputs.
  const int32_t* group_sizes = nullptr;  // [G]
  // Outputs.
  int32_t* first_row = nullptr;  // [G] exclusive prefix sums of the (cut) sizes
  int64_t* rows = nullptr;       // [1] their total
  void* out = nullptr;           // [M, N]
  int out_bytes = 2;             // bytes per output element: 2 (bf16, f16) or 4 (f32)
  // Where: the device's SM count and stream (cudaStream_t).
  int sm_count = 1;
  void* stream = nullptr;
};

// Enqueues first_row[] and rows from group_sizes.
void ragged_dot_cudnn_offsets(const CudnnRaggedDotPrep& prep);
// Enqueues the zeroing of output rows [rows, M).
void ragged_dot_cudnn_zero_tail(const CudnnRaggedDotPrep& prep);

}  // namespace tokamax
