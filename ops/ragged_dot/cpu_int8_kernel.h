// ragged_dot on CPU: the int8 x int8 path of maybe_quantize_lhs with int8 weights, on
// AVX512-VNNI's vpdpbusd (u8 x s8, four products summed into each int32 lane: 64 multiply-adds
// an instruction, twice vdpbf16ps's).
//
// Dimensions.
//   K      contraction extent; Kq = round_up(K, 4) with zero codes past K
//   mr     rows of a micro-tile; nr = 16 nv columns (nv int32 vectors)
//   depth  one K block of the kernel, a multiple of 4 within one scale block
//
// lhs is quantized per row and scale block (quantize_row_int8) and stored as u8 = q + 128, the
// unsigned operand of vpdpbusd; the +128 is taken back with the column sums of the weights:
// sum_k (q_k + 128) w_k - 128 sum_k w_k = sum_k q_k w_k, exact in int32 (|sum| <= K 255 127).
// rhs codes are packed per K block as [strip][depth / 4][nr][4]: each int32 lane holds the four
// consecutive k of one column, the operand layout of vpdpbusd. After each K block the int32 sums
// become f32: (sum - 128 colsum) * s_lhs[row, block] * s_rhs[block, column], added to the f32
// partial sums of the task, which the f32 path's epilogue and store then read.
#pragma once

#include <cstdint>

#include "ops/common/cpu_gemm/micro_kernel.h"

namespace tokamax {

// Whether this CPU and build run the int8 micro-kernels.
bool int8_vnni_available();

// The micro-tiles of the int8 path: (mr, nr) in {(8, 48), (6, 64)}.
bool has_int8_micro_kernel(int mr, int nr);

// quantize_row_int8 of one lhs row straight into the kernel's operand: codes[k] = q[k] + 128
// (the same codes and scales, bit for bit), for a bf16 or f32 row; false for other dtypes or
// without the instructions (the caller then runs quantize_row_int8).
bool quantize_row_u8(const void* x, bool bf16, int64_t K, int64_t b, uint8_t* codes, float* scales);

// rhs codes [depth, cols] (row stride ld) -> packed [ceil(cols / nr)][depth / 4][nr][4] int8,
// zero-padded past depth (to a multiple of 4) and past cols; colsum[c] += 128 * sum_k codes for
// the cols columns (the packed padding adds nothing). colsum has ceil(cols / nr) * nr entries.
void pack_rhs_int8_quads(const int8_t* rhs, int64_t ld, int64_t depth, int64_t cols, int nr,
                         int8_t* packed, int32_t* colsum);

struct Int8TileArgs {
  const uint8_t* lhs;      // codes + 128 of the micro-panel's first row at k0; row stride ld_lhs
  int64_t ld_lhs;          // (mr rows readable: rows past the panel's are read, not stored)
  int rows;                // rows to store, <= mr
  const int8_t* rhs;       // one packed strip of the K block
  int64_t quads;           // depth / 4
  const int32_t* colsum;   // [nr] 128 * column sums of this strip and K block
  const float* lhs_scale;  // s_lhs of the first row for this block; row stride ld_scale
  int64_t ld_scale;
  const float* rhs_scale;  // [nr] s_rhs of this block for the strip's columns (zero-padded)
  float* out;              // f32 partial sums [rows, cols], row stride ldc
  int64_t ldc;
  int cols;                // columns to store, <= nr
  bool accumulate;         // false: the first K block stores
  PrefetchShare prefetch;  // lines of the next panel's codes, spread over the K loop
};

// One mr x nr micro-tile over one K block. Returns false when (mr, nr) has no kernel here.
bool int8_tile(int mr, int nr, const Int8TileArgs& args);

// --- The same path on AMX tiles (TDPBUSD; cpu_int8_amx_kernel.cc). ----------------------------
// The u8 x s8 products of a block of up to 32 x 32 outputs run on four s32 accumulator tiles:
// the A tiles are the lhs codes in place (16 rows of 64 consecutive k, row stride Kq), the B
// tiles 16 quads of a 16-column strip; the int32 sums become f32 partial sums as above.

// Rows and columns of one AMX block, and the columns of one packed strip.
inline constexpr int kInt8AmxRows = 32;
inline constexpr int kInt8AmxCols = 32;
inline constexpr int kInt8AmxStrip = 16;

// Quads of a packed AMX strip for `depth`: whole tiles of 16 quads (64 k), the padding zero.
inline constexpr int64_t int8_amx_quads(int64_t depth) { return (depth + 63) / 64 * 16; }

// rhs codes [depth, cols] (row stride ld) -> [ceil(cols / 16)][int8_amx_quads(depth)][16][4],
// zero past depth and cols; colsum as pack_rhs_int8_quads (ceil(cols / 16) * 16 entries).
void pack_rhs_int8_amx(const int8_t* rhs, int64_t ld, int64_t depth, int64_t cols, int8_t* packed,
                       int32_t* colsum);

// One block over one K block: Int8TileArgs with rows, cols <= 32, rhs the first of its (one or
// two) strips, the next one int8_amx_quads(depth) quads later, quads = int8_amx_quads(depth); the
// lhs rows to the block's 32nd and 63 bytes past each row's K block must be readable. Returns
// false when the AMX build cannot run here.
bool int8_amx_block(const Int8TileArgs& args);

}  // namespace tokamax
