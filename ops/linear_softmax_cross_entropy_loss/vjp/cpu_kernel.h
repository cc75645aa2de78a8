// linear_softmax_cross_entropy_loss_vjp on CPU: the backward kernel's interface (dx and dw from
// the per-row log-sum-exp, the logits recomputed per V chunk and never materialised).
//
// Dimensions.
//   B, H, V      rows, hidden size, vocabulary size (see base.h)
//   tv, tb, th   V chunk, rows per logits / dx GEMM call, rows per dw GEMM call
//   nv           V ranges (tasks)
#pragma once

#include <cstdint>

#include "ops/common/cpu_gemm/gemm.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp/base.h"

namespace tokamax {

struct LsceVjpCpuKernelOptions {
  int64_t chunk_v = 512;  // tv
  int64_t tile_b = 256;   // tb
  int64_t tile_h = 256;   // th
  int64_t tile_n = 256;   // packed panel width inside a GEMM call
  int64_t tile_k = 256;   // K block of a GEMM call
  int64_t v_splits = 1;   // nv >= 1
  int mr = 0;             // micro-tile (0, 0 = the CPU's first shape)
  int nr_vectors = 0;
  // Of all products; a bf16 engine (bf16 x and w) rounds dz to bf16.
  GemmEngine engine = GemmEngine::kF32Fma;
  int num_threads = 0;  // 0 = all cores
};

// dx = dz w^T and dw = x^T dz with dz_b = c_b (softmax(z_b) - onehot(labels_b)), z = x w
// recomputed chunk by chunk in f32. lse[b] is row b's log-sum-exp (any value where c_b = 0:
// such rows get dx = 0 and add nothing to dw). x and w are f32, bf16 or f16; dx and dw are of
// their dtypes.
void lsce_vjp_cpu_kernel(const LinearSoftmaxCrossEntropyVjpProblem& p,
                         const LsceVjpCpuKernelOptions& options,
                         // Inputs.
                         const void* x,          // [B, H] x_dtype, full array
                         const int32_t* labels,  // [B]
                         const void* w,          // [H, V] w_dtype, full array
                         const double* lse,      // [B]
                         const double* c,        // [B] the rows' cotangent weights c_b
                         // Outputs.
                         void* dx,   // [B, H] x_dtype
                         void* dw);  // [H, V] w_dtype

}  // namespace tokamax
