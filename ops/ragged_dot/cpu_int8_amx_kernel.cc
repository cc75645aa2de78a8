// ragged_dot on CPU: the int8 path's AMX build, a block of up to 32 x 32 outputs on TDPBUSD tiles,
// one template over the tile operations (backends/cpu/amx_tiles.h) for the hardware and its
// emulation.
//
// Dimensions.
//   Qp     quads of the packed strips: whole tiles of 16 quads (64 k)
//   rows, cols   of the block (<= 32 each): 1 or 2 row tiles x 1 or 2 strips
//
// Tiles: accumulators tmm0-3 (rows 0-15 / 16-31 x columns 0-15 / 16-31), A tmm4-5 (the two row
// tiles, read from the lhs codes in place), B tmm6-7 (the two strips). Each k step of 64 loads
// four operand tiles for four products, as the bf16 block product does.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/amx.h"
#include "backends/cpu/amx_tiles.h"
#include "ops/ragged_dot/cpu_int8_kernel.h"

namespace tokamax {
namespace {

// The block's s32 sums in the accumulator tiles, over all of a.quads (Int8TileArgs: lhs codes,
// packed strips); spreads the prefetch share over the k steps.
template <class Tiles, bool kTwoRows, bool kTwoCols>
void products(const Int8TileArgs& a, PrefetchShare& prefetch) {
  const int64_t steps = a.quads / 16;
  const int64_t lines_per_step = steps > 0 ? (prefetch.lines + steps - 1) / steps : 0;
  const int8_t* rhs_next = a.rhs + a.quads * kInt8AmxStrip * 4;
  const uint8_t* lhs_next = a.lhs + 16 * a.ld_lhs;
  Tiles::template zero<0>();
  if constexpr (kTwoCols) Tiles::template zero<1>();
  if constexpr (kTwoRows) Tiles::template zero<2>();
  if constexpr (kTwoRows && kTwoCols) Tiles::template zero<3>();
  for (int64_t j = 0; j < steps; ++j) {
    Tiles::template load<4>(a.lhs + 64 * j, a.ld_lhs);
    Tiles::template load<6>(a.rhs + j * 1024, 64);
    if constexpr (kTwoRows) Tiles::template load<5>(lhs_next + 64 * j, a.ld_lhs);
    if constexpr (kTwoCols) Tiles::template load<7>(rhs_next + j * 1024, 64);
    Tiles::template dpbusd<0, 4, 6>();
    if constexpr (kTwoCols) Tiles::template dpbusd<1, 4, 7>();
    if constexpr (kTwoRows) Tiles::template dpbusd<2, 5, 6>();
    if constexpr (kTwoRows && kTwoCols) Tiles::template dpbusd<3, 5, 7>();
    for (int64_t l = 0; l < lines_per_step; ++l) prefetch.next();
  }
}

template <class Tiles>
void block(const Int8TileArgs& a) {
  amx::TileConfig config;
  for (int t = 0; t < amx::kTiles; ++t) config.set(t, amx::kMaxRows, amx::kMaxColsb);
  Tiles::configure(config);
  PrefetchShare prefetch = a.prefetch;
  const bool two_rows = a.rows > 16, two_cols = a.cols > kInt8AmxStrip;
  if (two_rows && two_cols) {
    products<Tiles, true, true>(a, prefetch);
  } else if (two_rows) {
    products<Tiles, true, false>(a, prefetch);
  } else if (two_cols) {
    products<Tiles, false, true>(a, prefetch);
  } else {
    products<Tiles, false, false>(a, prefetch);
  }
  // The s32 sums of the whole block (tiles not computed are never read below).
  alignas(64) int32_t sums[kInt8AmxRows][kInt8AmxCols];
  constexpr int64_t kStride = kInt8AmxCols * sizeof(int32_t);
  Tiles::template store<0>(&sums[0][0], kStride);
  if (two_cols) Tiles::template store<1>(&sums[0][16], kStride);
  if (two_rows) Tiles::template store<2>(&sums[16][0], kStride);
  if (two_rows && two_cols) Tiles::template store<3>(&sums[16][16], kStride);
  Tiles::release();
  // (sum - 128 colsum) * (s_rhs * s_lhs), in the vpdpbusd tile's order of operations, so both
  // builds give the same f32 partial sums.
  for (int r = 0; r < a.rows; ++r) {
    const float s = a.lhs_scale[r * a.ld_scale];
    float* out = a.out + r * a.ldc;
    for (int c = 0; c < a.cols; ++c) {
      const float v = static_cast<float>(sums[r][c] - a.colsum[c]) * (a.rhs_scale[c] * s);
      out[c] = a.accumulate ? out[c] + v : v;
    }
  }
}

}  // namespace

void pack_rhs_int8_amx(const int8_t* rhs, int64_t ld, int64_t depth, int64_t cols, int8_t* packed,
                       int32_t* colsum) {
  const int64_t quads = (depth + 3) / 4, padded = int8_amx_quads(depth);
  for (int64_t c0 = 0; c0 < cols; c0 += kInt8AmxStrip) {
    // One strip at a time: its quads, then zero quads to the whole tile.
    int8_t* strip = packed + c0 / kInt8AmxStrip * padded * kInt8AmxStrip * 4;
    pack_rhs_int8_quads(rhs + c0, ld, depth, std::min<int64_t>(kInt8AmxStrip, cols - c0),
                        kInt8AmxStrip, strip, colsum + c0);
    std::memset(strip + quads * kInt8AmxStrip * 4, 0, (padded - quads) * kInt8AmxStrip * 4);
  }
}

bool int8_amx_block(const Int8TileArgs& args) {
  switch (cpu::tile_mode()) {
#if defined(__x86_64__)
    case cpu::TileMode::kHardware:
      if (!cpu::host_amx().int8) return false;
      block<amx::HardwareTiles>(args);
      return true;
#endif
    case cpu::TileMode::kEmulated:
      block<amx::EmulatedTiles>(args);
      return true;
    default:
      return false;
  }
}

}  // namespace tokamax
