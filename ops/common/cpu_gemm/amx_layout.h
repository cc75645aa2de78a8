// CPU GEMM engine: the AMX engine's operand layouts, packers and block product (bf16 x bf16
// into f32 on TDPBF16PS), in plain integers and pointers; the kernel is amx_kernel.cc, the tile
// operations backends/cpu/amx_tiles.h.
//
// Dimensions.
//   rows, cols   extents of the block one call covers (one task's rows, one panel's columns)
//   depth        K extent of the current block; Kp = amx_pairs(depth): its bf16 pairs rounded up
//                to whole tiles of 16 pairs (32 k), the padding zero
//
// Layouts (32-bit words, each a bf16 pair (x[2i], x[2i+1]), even k in the low half):
//   lhs block   [ceil(rows / 16)][16][Kp]  row-major 16-row panels: the A tile of panel p and
//                                          k step j is 16 rows of 16 words, row stride Kp words
//   rhs panel   [ceil(cols / 16)][Kp][16]  16-column strips: the B tile of strip s and k step j
//                                          is 16 contiguous rows of 16 words (1 KiB)
// Rows past `rows` and columns past `cols` are zero, so every tile is whole and the padding
// adds exact zeros to accumulators that are never stored.
#pragma once

#include <cstdint>

#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/framework/dtype.h"

namespace tokamax {

inline constexpr int64_t kAmxTileRows = 16;   // rows of an A tile and of an accumulator tile
inline constexpr int64_t kAmxTileCols = 16;   // f32 columns of a B tile and an accumulator tile
inline constexpr int64_t kAmxTilePairs = 16;  // bf16 pairs of k one tile product covers

// Words of one packed row (lhs) or strip row count (rhs) for `depth`.
inline constexpr int64_t amx_pairs(int64_t depth) {
  return round_up(ceil_div(depth, 2), kAmxTilePairs);
}

// bf16 lhs [rows, depth] with row stride ld (transposed: stored [depth, rows], element (r, k) at
// lhs[k * ld + r]) -> lhs block; rhs [depth, cols] (transposed: stored [cols, depth]) -> rhs panel.
void pack_lhs_block_amx(const bf16* lhs, int64_t ld, bool transposed, int64_t rows, int64_t depth,
                        uint32_t* packed);
void pack_rhs_panel_amx(const bf16* rhs, int64_t ld, bool transposed, int64_t depth, int64_t cols,
                        uint32_t* packed);

// The block product on packed AMX layouts: out[rows, cols] (+)= lhs block x rhs panel in f32
// (BlockArgs: lhs_block, rhs, rows, cols, depth, out, ldc, accumulate, next_rhs; the micro-tile
// fields are unused). Runs on the tiles or their emulation as cpu::tile_mode() says; false when
// it says none.
bool block_product_amx_bf16(const BlockArgs& args);

// Whether the AMX bf16 / int8 tiles run in this process (on the hardware or emulated:
// cpu::tile_mode()).
bool gemm_has_amx_bf16();
bool gemm_has_amx_int8();

}  // namespace tokamax
