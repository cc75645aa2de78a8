// CPU GEMM engine: the calls between a client's task loop (ops/ragged_dot/cpu_kernel.cc,
// gemm.cc) and the micro-kernels.
//
// Dimensions.
//   K      contraction extent
//   rows   rows of lhs one call covers (one task's, all in one group)
//   cols   output columns one call covers
//   depth  K extent of the current block (<= tk); pairs = ceil(depth / 2) for bf16 pairs
//   mr, nr the micro-tile: mr rows x nr = nr_vectors * L columns of accumulators
//   L      lanes of one vector of the accumulation type (f32: 16 on AVX-512, 8 on AVX2)
//
// The micro-kernels live in three translation units: micro_kernel.cc (Highway, compiled once
// per SIMD target: f32/f64 block products), stream_kernel.cc (Highway: tasks of few rows)
// and bf16_kernel.cc (vdpbf16ps, compiled for avx512bf16 only). Each entry point returns
// false for a shape or dtype it does not instantiate; the caller turns that into NotImplemented.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/framework/dtype.h"

namespace tokamax {

// The source rows of the rhs panel a task will pack next: `rows` rows of `bytes` bytes, `stride`
// bytes apart. The block product spreads L2 prefetches of it over its micro-tiles, so the next
// panel's DRAM reads overlap this panel's FMAs instead of stalling its packing (one group's rhs
// is read from memory exactly once, and in MoE layers it is most of the bytes).
struct PrefetchPlan {
  const char* base = nullptr;
  int64_t rows = 0, stride = 0, bytes = 0;
};

// `lines` cache lines of a PrefetchPlan from `row`'s line + `offset` on, in its order (a row's
// lines, then the next row's). A micro-kernel with a long loop of its own spreads them over it,
// one every few iterations, instead of issuing them in a burst between micro-tiles.
struct PrefetchShare {
  const char* row = nullptr;  // the first byte of the row of the first line
  int64_t offset = 0;         // the line's byte offset from the row's first line, a multiple of 64
  int64_t lines = 0;
  int64_t span = 0, stride = 0;  // bytes of a row's lines; the plan's stride

  // The line the share prefetches next.
  const char* line() const {
    const auto first = reinterpret_cast<uintptr_t>(row) & ~uintptr_t{63};
    return reinterpret_cast<const char*>(first) + offset;
  }
  // Prefetches the next line into L2 (locality 2: not L1, which holds the micro-kernel's
  // operands) and moves past it; nothing once the share is spent.
  void next() {
    if (lines <= 0) return;
    __builtin_prefetch(line(), 0, 2);
    advance();
  }
  // Moves past the next line without prefetching it.
  void advance() {
    --lines;
    offset += 64;
    if (offset >= span) {
      offset = 0;
      row += stride;
    }
  }
};

class PrefetchCursor {
 public:
  // A row that starts off a line boundary (a misaligned base or stride: the up half of an int8
  // [gate | up] at column 1440) touches one line more than its bytes fill: every row then takes
  // that line too (past the row's end where it starts aligned: a prefetch never faults).
  PrefetchCursor(const PrefetchPlan& plan, int64_t steps) : plan_(plan) {
    const bool aligned =
        reinterpret_cast<uintptr_t>(plan.base) % kLine == 0 && plan.stride % kLine == 0;
    lines_per_row_ = (plan.bytes + kLine - 1) / kLine + (aligned ? 0 : 1);
    const int64_t lines = plan.rows * lines_per_row_;
    per_step_ = steps > 0 ? (lines + steps - 1) / steps : 0;
  }
  // Prefetches the next share of the lines into L2 at once.
  void step() {
    PrefetchShare share = take();
    while (share.lines > 0) share.next();
  }
  // The next share, for a kernel to prefetch over its own loop.
  PrefetchShare take() {
    PrefetchShare share;
    const int64_t first = row_ * lines_per_row_ + offset_ / kLine;
    const int64_t count =
        std::max<int64_t>(0, std::min(per_step_, plan_.rows * lines_per_row_ - first));
    if (count == 0) return share;
    share = {plan_.base + row_ * plan_.stride, offset_, count, lines_per_row_ * kLine,
             plan_.stride};
    row_ = (first + count) / lines_per_row_;
    offset_ = (first + count) % lines_per_row_ * kLine;
    return share;
  }

 private:
  static constexpr int64_t kLine = 64;
  PrefetchPlan plan_;
  int64_t per_step_ = 0, lines_per_row_ = 0, row_ = 0, offset_ = 0;
};

// One call of the block product: every (micro-panel, strip) pair of a packed lhs block against
// an rhs panel, packed or read in place.
struct BlockArgs {
  const void* lhs_block;  // packed lhs block [ceil(rows / mr)][depth][mr] (or bf16 pairs)
  int64_t rows;
  const void* rhs;           // packed panel [strips][depth][nr], or rhs [depth, ldb] in place
  DType rhs_dtype;           // of `rhs` when in place; packed panels are of the accumulator type
  bool rhs_packed;           // in place: `cols` must be whole strips (no read past N)
  int64_t rhs_strip_stride;  // elements from one strip to the next: depth * nr, or nr in place
  int64_t ldb;               // elements from one k row to the next: nr, or N in place
  int64_t cols;
  int64_t depth;
  void* out;  // [rows, cols] accumulators of the accumulation type, row stride ldc
  int64_t ldc;
  bool accumulate;  // add to `out` (later K blocks) instead of overwriting it (first block)
  int mr, nr_vectors;
  PrefetchPlan next_rhs;  // what the task reads next (empty: nothing to prefetch)
};

// Tasks of at most this many rows whose rhs is read in place (packing=no_pack, or one
// micro-panel) stream rhs row by row instead of running micro-tiles: each rhs element feeds so
// few multiply-adds that reading it at full memory bandwidth is all that matters. Tile extents
// and the micro-tile shape do not affect them.
inline constexpr int64_t kCpuStreamRows = 4;

// One call of the streaming kernel for tasks of at most kCpuStreamRows rows: lhs rows times rhs
// [K, cols] read in place, row after row, over all of K.
struct StreamArgs {
  const void* lhs;  // [rows, K] lhs_dtype, row stride lda (0: K)
  DType lhs_dtype;
  int64_t rows;
  const void* rhs;  // [K, cols] rhs_dtype, row stride ldb
  DType rhs_dtype;
  int64_t ldb;
  int64_t K, cols;
  float* out;  // [rows, cols] f32, row stride ldc; overwritten, or added to with accumulate
  int64_t ldc;
  // Quantized rhs (i8, f8e4m3): row k of column c means code * scale[(k / scale_block) *
  // scale_ld + c], the value pack_rhs_panel_dequant packs (rounded to f32 before its product).
  const float* scale = nullptr;
  int64_t scale_ld = 0;
  int64_t scale_block = 0;
  int64_t lda = 0;
  bool accumulate = false;
};

// One call of the row-dot kernel: out[m, j] = sum_x q[m, x] rows[j, x] for m < M (1..4) f32
// query rows and n rows of f32/bf16/f16 read in place (row stride ld): attention's logits of a
// few queries against keys that are not contiguous enough to pack (a paged cache), each key row
// read once for all M queries.
struct RowDotArgs {
  const float* q;  // [M, K] row stride K
  int64_t M;
  const void* rows;  // [n, K] `dtype`, row stride ld
  DType dtype;
  int64_t ld;
  int64_t n, K;
  float* out;  // [M, n] row stride ldo
  int64_t ldo;
};

// stream_kernel.cc: false (nothing written) for M outside 1..kCpuStreamRows or another dtype.
bool row_dots_f32(const RowDotArgs& args);

// micro_kernel.cc: f32 accumulators (rhs packed, or f32/bf16/f16 in place) and f64
// accumulators (rhs packed only, first shape of the table only), on the dispatched SIMD target.
bool block_product_f32(const BlockArgs& args);
bool block_product_f64(const BlockArgs& args);

// stream_kernel.cc: 1..kCpuStreamRows rows of f32/bf16/f16 lhs times f32/bf16/f16 or quantized
// rhs into f32.
bool stream_rows_f32(const StreamArgs& args);

// bf16_kernel.cc: bf16 pairs (pack.h) into f32, on x86 CPUs with avx512_bf16 only.
bool block_product_bf16(const BlockArgs& args);
// Whether the native bf16 path can run here: an x86 CPU with avx512_bf16 (and AVX-512 kernels).
bool gemm_has_native_bf16();

}  // namespace tokamax
