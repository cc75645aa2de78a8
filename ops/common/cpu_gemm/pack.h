// CPU GEMM engine: packing of lhs/rhs tiles into micro-kernel layouts, and output conversion.
//
// Dimensions.
//   rows, cols   extents of the tile being packed (rows of lhs, columns of rhs)
//   depth        its extent along K (one K block, <= tk)
//   mr, nr       the micro-tile the packed layout feeds (see micro_tile.h)
//   ld           row stride of the source array, in elements
//
// Packed layouts, zero-padded so that the micro-kernel always runs whole mr x nr tiles and never
// needs a scalar edge loop:
//   lhs block   [ceil(rows / mr)][depth][mr]   micro-panel p: rows p*mr.., k-major, so the
//                                              micro-kernel broadcasts consecutive elements
//   rhs panel   [ceil(cols / nr)][depth][nr]   strip s: columns s*nr.., one k row of nr columns
//                                              = nr / lanes contiguous vectors
//   bf16 pairs  the same with depth -> ceil(depth / 2) 32-bit elements, each holding
//               (x[2i], x[2i+1]) with the even k in the low half: the operand layout of
//               vdpbf16ps (odd depth pads the last pair with +0)
// bf16/f16 inputs are widened to the accumulation type here, once per packed element, so the
// micro-kernel runs on f32 (or f64) whatever the storage dtype.
#pragma once

#include <cstdint>

#include "ops/framework/dtype.h"

namespace tokamax {

// `stream` (the f32 and pair layouts): whole-vector stores at 64-byte aligned addresses bypass
// the caches (non-temporal), for operands packed well before they are read: a store that
// allocates first reads its line from memory. The caller fences (_mm_sfence) before another
// thread reads the result.

// lhs [rows, depth] of `dtype` (row stride ld) -> packed lhs block.
void pack_lhs_block(DType dtype, const void* lhs, int64_t ld, int64_t rows, int64_t depth,
                    int64_t mr, float* packed, bool stream = false);
void pack_lhs_block(DType dtype, const void* lhs, int64_t ld, int64_t rows, int64_t depth,
                    int64_t mr, double* packed);

// rhs [depth, cols] of `dtype` (row stride ld) -> packed rhs panel.
void pack_rhs_panel(DType dtype, const void* rhs, int64_t ld, int64_t depth, int64_t cols,
                    int64_t nr, float* packed, bool stream = false);
void pack_rhs_panel(DType dtype, const void* rhs, int64_t ld, int64_t depth, int64_t cols,
                    int64_t nr, double* packed);

// Quantized rhs codes [depth, cols] of `dtype` (i8 or f8e4m3, row stride ld) -> packed f32 rhs
// panel of the dequantized weights code * scale: row k (k0 + k of the whole K) of column c takes
// scale[((k0 + k) / block) * scale_ld + c] (one scale row per K block of `block` rows).
void pack_rhs_panel_dequant(DType dtype, const void* rhs, int64_t ld, int64_t depth, int64_t cols,
                            int64_t nr, const float* scale, int64_t scale_ld, int64_t k0,
                            int64_t block, float* packed);

// f8e4m3 codes [depth, cols] (row stride ld) -> the same values as bf16 [depth, cols] (row
// stride cols), exactly: e4m3's 3 mantissa bits and its exponent range fit bf16's, so fp8
// weights can ride the bf16 engines (native_dot, the AMX tiles) with their scales applied to
// the products.
void decode_f8e4m3_to_bf16(const uint8_t* codes, int64_t ld, int64_t depth, int64_t cols,
                           bf16* out);

// bf16 lhs [rows, depth] / rhs [depth, cols] -> bf16 pair layouts (no conversion: the native
// dot instruction multiplies bf16 directly).
void pack_lhs_block_pairs(const bf16* lhs, int64_t ld, int64_t rows, int64_t depth, int64_t mr,
                          uint32_t* packed, bool stream = false);
void pack_rhs_panel_pairs(const bf16* rhs, int64_t ld, int64_t depth, int64_t cols, int64_t nr,
                          uint32_t* packed, bool stream = false);

// f32 accumulators [rows, cols] (row stride ld_acc) -> out [rows, cols] of `out_dtype` (row
// stride ld_out): f32 copied, bf16 and f16 rounded to nearest even (NaN stays NaN, overflow goes
// to infinity), exactly like float_to_bf16 / float_to_f16.
void store_rows(const float* acc, int64_t ld_acc, int64_t rows, int64_t cols, DType out_dtype,
                void* out, int64_t ld_out);

}  // namespace tokamax
