// The flash-attention core (every attention op's CPU kernel): packing K, V and P into micro-kernel
// layouts, and the scalar element helpers of the kernel (loads, stores, bias rows).
//
// Dimensions.
//   B      flattened batch;  t  key/value positions;  b, i  a batch and a kv head
//   h      key/value heads;  D, d  q/k and v head dimensions
//   bkv    keys per kv block (a multiple of nr);  M  rows of a task's P tile;  n  keys of a block
//   mr, nr the micro-tile (a shape of micro_kernel_shapes, ops/common/cpu_gemm/micro_tile.h)
#pragma once

#include <cstdint>
#include <vector>

#include "ops/common/flash_attention/problem.h"
#include "ops/framework/dtype.h"

namespace tokamax {

// Element `at` of an f32/bf16/f16/f64 array, as f32.
float attention_load(DType dtype, const void* data, int64_t at);

// s[c] += bias[at + c * stride] for c in [c_lo, c_hi).
void add_bias_row(DType dtype, const void* bias, int64_t at, int64_t stride, int64_t c_lo,
                  int64_t c_hi, float* s);

// Keys [j0, j0 + n) of K (value false) or V of kv head (b, i) in `base` (k or v) as one block of
// rows `ld` elements apart: where they are, unless they are paged and cross a page (then copied
// into `staging`, n x width elements of p.dtype).
struct KvRows {
  const void* data;
  int64_t ld;
};
KvRows kv_rows(const FlashAttentionProblem& p, const void* base, bool value, int64_t b, int64_t i,
               int64_t j0, int64_t n, std::vector<char>& staging);

// rows [count, depth] of `dtype` (row stride ld) -> [ceil(count / nr)][depth][nr] f32, zero padded
// (native, bf16 only: pairs along depth, [ceil(count / nr)][ceil(depth / 2)][nr] uint32): the
// rows transposed into rhs strips of the micro-kernels.
void pack_strips(DType dtype, const void* rows, int64_t ld, int64_t count, int64_t depth,
                 int64_t nr, bool native, float* out);
// K^T of kv head (b, i) as the rhs of S = Q K^T over all of t: [ceil(t / nr)][D][nr] f32 (bf16
// pairs: [ceil(t / nr)][ceil(D / 2)][nr] uint32), so kv block j0 (a multiple of nr) is the
// panel starting at strip j0 / nr.
void pack_k(const FlashAttentionProblem& p, const void* k, int64_t b, int64_t i, int64_t nr,
            bool native, float* out);
// K of kv head (b, i) as lhs micro-panels of S^T = K Q^T over all of t: [ceil(t / mr)][D][mr]
// (bf16 pairs: [ceil(t / mr)][ceil(D / 2)][mr]), so kv block j0 (a multiple of mr) is the block
// starting at panel j0 / mr.
void pack_k_panels(const FlashAttentionProblem& p, const void* k, int64_t b, int64_t i, int64_t mr,
                   bool native, float* out);
// V of kv head (b, i) as the rhs of O += P V, one panel per kv block of bkv keys:
// [ceil(t / bkv)][ceil(d / nr)][bkv][nr] (bf16 pairs: bkv / 2), the last block shorter.
void pack_v(const FlashAttentionProblem& p, const void* v, int64_t b, int64_t i, int64_t nr,
            int64_t bkv, bool native, float* out);
// P [M, n] f32 (row stride ld, finite and >= 0) -> the bf16-pair lhs layout
// [ceil(M / mr)][ceil(n / 2)][mr], rounded to nearest even.
void pack_p_pairs(const float* s, int64_t ld, int64_t M, int64_t n, int64_t mr, uint32_t* out);
// The same result in two vectorized passes where the CPU has avx512_bf16 (the native_dot path):
// rows rounded into `rounded` [M, ld] bf16 (vcvtne2ps2bf16), then the GEMM engine's pair packing.
// Falls back to pack_p_pairs elsewhere.
// P^T [n, cols] f32 (row stride ld, finite and >= 0) -> the bf16-pair rhs layout
// [ceil(cols / nr)][ceil(n / 2)][nr], rounded to nearest even through `rounded` [n, ld] bf16.
void pack_pt_pairs_rounded(const float* s, int64_t ld, int64_t n, int64_t cols, int64_t nr,
                           bf16* rounded, uint32_t* out);
void pack_p_pairs_rounded(const float* s, int64_t ld, int64_t M, int64_t n, int64_t mr,
                          bf16* rounded, uint32_t* out);

}  // namespace tokamax
