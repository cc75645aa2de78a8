// CPU GEMM engine: packing of bf16 operands into the AMX tile layouts (amx_layout.h).
//
// Dimensions.
//   rows, cols   extents of the block being packed (rows of lhs, columns of rhs)
//   depth        its extent along K (one K block); Kp = amx_pairs(depth) pairs, zero-padded
//   ld           row stride of the source array, in elements
//
// Plain loops: a packed element is read by a whole row of tiles (16 columns or rows of products
// each), so packing is a small share of a call; the row copies of the untransposed lhs are
// memcpy, the rest is left to the compiler's vectorizer.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/common/cpu_gemm/amx_layout.h"
#include "ops/common/cpu_gemm/micro_tile.h"

namespace tokamax {
namespace {

uint32_t pair_bits(bf16 even, bf16 odd) {
  return static_cast<uint32_t>(even.bits) | (static_cast<uint32_t>(odd.bits) << 16);
}

}  // namespace

void pack_lhs_block_amx(const bf16* lhs, int64_t ld, bool transposed, int64_t rows, int64_t depth,
                        uint32_t* packed) {
  const int64_t Kp = amx_pairs(depth);
  const int64_t padded_rows = round_up(rows, kAmxTileRows);
  if (!transposed) {
    for (int64_t r = 0; r < padded_rows; ++r) {
      uint32_t* dst = packed + r * Kp;
      const int64_t copied = r < rows ? depth : 0;
      if (copied > 0) std::memcpy(dst, lhs + r * ld, copied * sizeof(bf16));
      // The rest of the row: the odd depth's last pair's high half and the padding pairs.
      std::memset(reinterpret_cast<uint16_t*>(dst) + copied, 0,
                  (2 * Kp - copied) * sizeof(uint16_t));
    }
    return;
  }
  // Stored [depth, rows]: row m of the block is column m of the storage. Rows of the storage
  // are read in order, two at a time (one pair of k).
  std::memset(packed, 0, padded_rows * Kp * sizeof(uint32_t));
  const bf16 zero{};
  for (int64_t i = 0; 2 * i < depth; ++i) {
    const bf16* even = lhs + 2 * i * ld;
    const bf16* odd = 2 * i + 1 < depth ? even + ld : nullptr;
    for (int64_t m = 0; m < rows; ++m) packed[m * Kp + i] = pair_bits(even[m], odd ? odd[m] : zero);
  }
}

void pack_rhs_panel_amx(const bf16* rhs, int64_t ld, bool transposed, int64_t depth, int64_t cols,
                        uint32_t* packed) {
  const int64_t Kp = amx_pairs(depth);
  const int64_t strips = ceil_div(cols, kAmxTileCols);
  std::memset(packed, 0, strips * Kp * kAmxTileCols * sizeof(uint32_t));
  const bf16 zero{};
  if (!transposed) {
    // Stored [depth, cols]: a pair of storage rows gives one row of every strip.
    for (int64_t i = 0; 2 * i < depth; ++i) {
      const bf16* even = rhs + 2 * i * ld;
      const bf16* odd = 2 * i + 1 < depth ? even + ld : nullptr;
      for (int64_t s = 0; s < strips; ++s) {
        uint32_t* dst = packed + (s * Kp + i) * kAmxTileCols;
        const int64_t c0 = s * kAmxTileCols;
        const int64_t width = std::min<int64_t>(kAmxTileCols, cols - c0);
        for (int64_t c = 0; c < width; ++c) {
          dst[c] = pair_bits(even[c0 + c], odd ? odd[c0 + c] : zero);
        }
      }
    }
    return;
  }
  // Stored [cols, depth]: column n's k run is contiguous, so each of its pairs is one 32-bit
  // load (the odd depth's last pair takes a zero high half).
  for (int64_t n = 0; n < cols; ++n) {
    const bf16* column = rhs + n * ld;
    uint32_t* dst = packed + (n / kAmxTileCols) * Kp * kAmxTileCols + n % kAmxTileCols;
    for (int64_t i = 0; 2 * i < depth; ++i) {
      dst[i * kAmxTileCols] =
          pair_bits(column[2 * i], 2 * i + 1 < depth ? column[2 * i + 1] : zero);
    }
  }
}

}  // namespace tokamax
