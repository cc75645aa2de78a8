// The flash-attention core (every attention op's CPU kernel): what the kernel's driver (forward.cc
// / vjp.cc) hands each task, and the task bodies of its two layouts.
//
// Dimensions.
//   B      flattened batch;  T, t  query and key/value positions
//   H, h   query and key/value heads, g = H / h
//   D, d   q/k and v head dimensions
//   bkv    keys per inner block;  M  columns or rows of one task's tiles (heads * rows)
//   mr, nr the micro-tile: mr rows x nr columns of accumulators
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/flash_attention/forward.h"
#include "ops/common/flash_attention/problem.h"

namespace tokamax {

// x[0..n) rounded to the nearest bf16 (ties to even), in place: the logits under bf16_logits
// (finite or -inf, never NaN, so the bit trick needs no NaN case).
inline void round_row_to_bf16(float* x, int64_t n) {
  for (int64_t e = 0; e < n; ++e) {
    const uint32_t bits = std::bit_cast<uint32_t>(x[e]);
    x[e] = std::bit_cast<float>((bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u);
  }
}

struct TaskContext {
  const FlashAttentionProblem& p;
  const CpuAttentionKernelOptions& o;
  const void* q;
  const void* k;
  const void* v;
  const void* bias;
  const bool* mask;
  void* out;
  AttentionBroadcast bias_at, mask_at;
  // Shared packing: K and V of the current chunk's kv heads, packed once for all tasks.
  const float* packed = nullptr;  // [chunk kv heads][kv_head_floats] (bf16 pairs: uint32)
  int64_t kv_head_floats = 0, v_offset = 0;
  int64_t chunk_first = 0;  // flattened (b * h + i) of the chunk's first kv head
  int mr = 0, nr_vectors = 0;
  int64_t nr = 0, bkv = 0;   // bkv a multiple of nr (rows layout) or of mr (transposed layout)
  float* lse = nullptr;      // [B, H, T] f32 with return_residuals, else null
  float* row_max = nullptr;  // [B, H, T] f32 each row's largest logit (or sink), or null
  // Dropout: P's entries times dropout_scale where dropout[...] keeps them, else 0 (after the
  // running sum has counted them).
  const bool* dropout = nullptr;
  AttentionBroadcast dropout_at{};
  float dropout_scale = 1.0f;
};

// The residuals of the task's M = heads * rows rows (row m = head_j * rows + rr) from their
// online-softmax state, stats(m) = {shift, sum of exp(logit - shift), the row's largest logit},
// in the logits' units: lse = shift + log(sum) (with return_residuals) and row_max (when asked).
template <typename Stats>
void store_task_stats(const TaskContext& ctx, int64_t b, int64_t hq0, int64_t heads, int64_t r0,
                      int64_t rows, Stats&& stats) {
  if (!ctx.lse && !ctx.row_max) return;
  for (int64_t jh = 0; jh < heads; ++jh) {
    for (int64_t rr = 0; rr < rows; ++rr) {
      const auto [shift, sum, max] = stats(jh * rows + rr);
      const int64_t at = (b * ctx.p.H + hq0 + jh) * ctx.p.T + r0 + rr;
      if (ctx.lse) {
        ctx.lse[at] = sum > 0.0f ? shift + std::log(sum) : -std::numeric_limits<float>::infinity();
      }
      if (ctx.row_max) ctx.row_max[at] = max;
    }
  }
}

// Grows a per-thread scratch vector to at least n elements; it never shrinks, so a thread's
// scratch settles at its largest task.
template <typename T>
void grow_scratch(std::vector<T>& x, size_t n) {
  if (x.size() < n) x.resize(n);
}

// One block product on the micro-kernels: bf16 pairs (native) or f32. Throws NotImplemented when
// no micro-kernel has the shape.
void attention_block_product(const BlockArgs& args, bool native);

// Rows layout (kv_packing shared or per_block): S = Q K^T [M, bkv], softmax along rows,
// O += P V. Rows [r0, r0 + rows) of q heads [hq0, hq0 + heads) of batch b.
void run_task_rows(const TaskContext& ctx, int64_t b, int64_t hq0, int64_t heads, int64_t r0,
                   int64_t rows);
// Transposed layout (kv_packing transposed): S^T = K Q^T [bkv, M], softmax down columns,
// O^T += V^T P^T; the same task.
void run_task_transposed(const TaskContext& ctx, int64_t b, int64_t hq0, int64_t heads, int64_t r0,
                         int64_t rows);

}  // namespace tokamax
