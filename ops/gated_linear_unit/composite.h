// gated_linear_unit: the vendor baselines' composite (onednn, mkl): the library's matmul of x with
// the weights into an f32 Y [rows, 2N] (gate half, projection half), then act(gate) * proj in our
// own loop, rounded to x's dtype.
//
// Dimensions.
//   M      rows of x, *B flattened
//   K      contraction extent
//   N      output features; W = weights viewed as [K, 2N] (gate columns 0..N-1, projection N..)
//   mc     rows of one chunk (the last chunk may be shorter)
#pragma once

#include <cstdint>
#include <functional>

#include "ops/framework/tensor.h"
#include "ops/gated_linear_unit/base.h"

namespace tokamax {

// The f32 intermediate of one chunk: at most 2^25 elements (128 MiB) by default, so the largest
// catalog shapes (4M rows x 2N) do not need gigabytes next to their inputs.
inline constexpr int64_t kGluCompositeChunkElements = int64_t{1} << 25;

// y[rows, cols] (row stride ld_y, f32) = x[rows, K] (row stride K) @ w[K, cols] (row stride
// cols), x and w of the problem's input dtype; the library's call, synchronous.
using GluCompositeMatmul = std::function<void(int64_t rows, int64_t cols, const void* x,
                                              const void* w, float* y, int64_t ld_y)>;

// Runs the composite over chunks of `chunk_rows` rows (0: as many as kGluCompositeChunkElements
// allows): per chunk one matmul with the fused W [K, 2N] or one per half (Wg, Wp [K, N]) into
// the halves of Y, then the epilogue on our pool (cpu_glu_row and store_rows, the cpu
// implementation's own, so the comparison isolates the fusion and the GEMM). K = 0 writes zeros.
void run_glu_composite(const GluProblem& p, int64_t chunk_rows, const GluCompositeMatmul& matmul,
                       const TensorMap& inputs, TensorMap& outputs);

}  // namespace tokamax
