// The flash-attention core (every attention op's CPU kernel): the flash-attention kernel (tiles,
// online softmax, threads).
//
// Dimensions.
//   B      flattened batch;  T, t  query and key/value positions
//   H, h   query and key/value heads, g = H / h
//   D, d   q/k and v head dimensions
//   bq, bkv  query rows per task and head, keys per inner block
//   M      rows of one task: (heads per task) * bq
#pragma once

#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/flash_attention/problem.h"
#include "ops/framework/tensor.h"

namespace tokamax {

struct CpuAttentionKernelOptions {
  int block_q = 64;
  int block_kv = 256;
  bool group_heads = true;
  // The GEMMs' engine. The bf16 engines (bf16 inputs: vdpbf16ps, AMX tiles) round P to bf16;
  // the AMX one runs per-block packing only (shared_kv_packing false).
  GemmEngine engine = GemmEngine::kF32Fma;
  // K^T and V packed once per kv head and shared by its tasks (block_kv rounded up to whole
  // micro-kernel strips); otherwise every block goes through cpu_gemm_f32, which repacks them.
  bool shared_kv_packing = true;
  // With shared packing: the transposed layout, S^T = K Q^T and O^T += V^T P^T, softmax down
  // columns (no packing of P, no per-row reductions); bias and mask tensors take a slow path.
  bool transposed = false;
  int num_threads = 0;  // 0 = all cores
};

// The micro-tile of the transposed layout for tasks of M query columns and head dimension d:
// the one that pads d to whole panels (mr) and M to whole strips (nr) least, among the shapes of
// 24 or more accumulators.
MicroKernelShape attention_transposed_shape(int lanes, int64_t M, int64_t d);

// Computes out for every (batch, head, query tile) task on the thread pool; per-thread scratch is
// O(M * (D + bkv + d)), never a whole [T, t] score matrix. Throws NotImplemented for f64.
void flash_attention_cpu(const FlashAttentionProblem& p, const CpuAttentionKernelOptions& options,
                         // Inputs.
                         const Tensor& q,     // [*B, T, H, D]
                         const Tensor& k,     // [*B, t, h, D]
                         const Tensor& v,     // [*B, t, h, d]
                         const Tensor* bias,  // broadcast to [*B, H, T, t]
                         const Tensor* mask,  // bool, broadcast likewise
                         // Outputs.
                         Tensor& out,            // [*B, T, H, d]
                         Tensor* lse = nullptr,  // [*B, H, T] f32, or null
                         // Inputs.
                         const Tensor* dropout_mask = nullptr,  // bool, as mask
                         // Outputs.
                         Tensor* row_max = nullptr);  // [*B, H, T] f32: max logit, or null

}  // namespace tokamax
