// linear_softmax_cross_entropy_loss on CPU: the fused kernel's interface (per-row log-sum-exp and
// label logit, streamed over V without materialising the logits).
//
// Dimensions.
//   B      rows of x (tokens), one label each
//   H      hidden size: the contraction extent of the logits x @ w
//   V      vocabulary size
//   tb     rows of one row tile (tile_b)
//   tv     logits columns of one chunk (chunk_v): the logits tile is [tb, tv] f32
//   nv     V ranges (v_splits): tasks are (row tile, V range) pairs
#pragma once

#include <cstdint>

#include "ops/common/cpu_gemm/gemm.h"
#include "ops/linear_softmax_cross_entropy_loss/base.h"

namespace tokamax {

struct LsceCpuKernelOptions {
  int64_t tile_b = 256;    // tb
  int64_t chunk_v = 2048;  // tv
  int64_t tile_n = 256;    // packed w panel width inside the GEMM tile
  int64_t tile_k = 256;    // K block of the GEMM tile
  int64_t v_splits = 1;    // nv >= 1
  int mr = 0;              // micro-tile (0, 0 = the CPU's first shape)
  int nr_vectors = 0;
  GemmEngine engine = GemmEngine::kF32Fma;  // of the x w products (bf16 engines: bf16 x and w)
  int num_threads = 0;                      // 0 = all cores
};

// lse[i] = log sum_j exp(z_ij) and label_logit[i] = z_i,labels[i] for z = x @ w, accumulated in
// f32 (logits, per-chunk sums) and merged across chunks and V ranges in f64. label_logit[i] is
// left as it was for a label outside [0, V) (padding). x and w are f32, bf16 or f16.
void lsce_cpu_row_stats(const LinearSoftmaxCrossEntropyProblem& p,
                        const LsceCpuKernelOptions& options,
                        // Inputs.
                        const void* x,          // [B, H] x_dtype, full array
                        const int32_t* labels,  // [B]
                        const void* w,          // [H, V] w_dtype, full array
                        // Outputs.
                        double* lse,           // [B]
                        double* label_logit);  // [B]

}  // namespace tokamax
