// CPU GEMM engine: the AMX bf16 block product, one template over the tile operations
// (backends/cpu/amx_tiles.h) instantiated for the hardware tiles and for their emulation.
//
// Dimensions.
//   rows, cols   extents of the block (one task's rows, one panel's columns)
//   Kp           bf16 pairs of the block's depth, whole tiles of 16 (amx_layout.h)
//   p, s         16-row lhs panel and 16-column rhs strip indices
//
// Register use: a 32 x 32 block of outputs in four accumulator tiles (tmm0-3: rows 0-15 x
// columns 0-15, rows 0-15 x 16-31, rows 16-31 x 0-15, rows 16-31 x 16-31), two A tiles (tmm4-5,
// the two row panels) and two B tiles (tmm6-7, the two strips). Each k step loads four operand
// tiles (4 KiB) for four products of 16 x 16 x 32, so every loaded tile feeds two products:
// the fewest loads per product the eight registers allow.
#include <algorithm>
#include <cstdint>

#include "backends/cpu/amx.h"
#include "backends/cpu/amx_tiles.h"
#include "ops/common/cpu_gemm/amx_layout.h"

namespace tokamax {
namespace {

// One 16 x 16 accumulator tile's place in the output: where it starts and how much of it is
// real (tiles on the block's lower or right edge cover padding).
struct OutTile {
  float* out;
  int64_t rows, cols;
  bool whole() const { return rows == kAmxTileRows && cols == kAmxTileCols; }
};

// Starts accumulator tile C: from the output when later K blocks add to it and the tile lies
// wholly inside (one tile load), else from zero (an edge tile is added on store instead).
template <class Tiles, int C>
void start_tile(const OutTile& tile, int64_t ldc, bool accumulate) {
  if (accumulate && tile.whole()) {
    Tiles::template load<C>(tile.out, ldc * int64_t{sizeof(float)});
  } else {
    Tiles::template zero<C>();
  }
}

// Stores accumulator tile C; an edge tile goes through a bounce buffer so that nothing past
// the output's rows and columns is written.
template <class Tiles, int C>
void finish_tile(const OutTile& tile, int64_t ldc, bool accumulate) {
  if (tile.whole()) {
    Tiles::template store<C>(tile.out, ldc * int64_t{sizeof(float)});
    return;
  }
  alignas(64) float bounce[kAmxTileRows][kAmxTileCols];
  Tiles::template store<C>(bounce, kAmxTileCols * int64_t{sizeof(float)});
  for (int64_t r = 0; r < tile.rows; ++r) {
    float* dst = tile.out + r * ldc;
    for (int64_t c = 0; c < tile.cols; ++c)
      dst[c] = accumulate ? dst[c] + bounce[r][c] : bounce[r][c];
  }
}

// One block of up to 32 x 32 outputs over all Kp pairs: 1 or 2 row panels x 1 or 2 strips.
template <class Tiles, bool kTwoRows, bool kTwoCols>
void tile_block(
    // Inputs.
    const uint32_t* lhs,  // [16 or 32 rows][Kp] bf16 pairs, tile: the block's first panel
    const uint32_t* rhs,  // [Kp][16] bf16 pairs, tile: its first strip; the second follows
    int64_t Kp,
    // Outputs.
    const OutTile (&tiles)[4],  // the four 16 x 16 f32 output tiles, row stride ldc
    int64_t ldc, bool accumulate) {
  start_tile<Tiles, 0>(tiles[0], ldc, accumulate);
  if constexpr (kTwoCols) start_tile<Tiles, 1>(tiles[1], ldc, accumulate);
  if constexpr (kTwoRows) start_tile<Tiles, 2>(tiles[2], ldc, accumulate);
  if constexpr (kTwoRows && kTwoCols) start_tile<Tiles, 3>(tiles[3], ldc, accumulate);
  const int64_t lhs_stride = Kp * int64_t{sizeof(uint32_t)};
  constexpr int64_t kRhsStride = kAmxTileCols * int64_t{sizeof(uint32_t)};
  const uint32_t* lhs_next = lhs + kAmxTileRows * Kp;  // the second row panel
  const uint32_t* rhs_next = rhs + Kp * kAmxTileCols;  // the second strip
  for (int64_t j = 0; j < Kp; j += kAmxTilePairs) {
    Tiles::template load<4>(lhs + j, lhs_stride);
    Tiles::template load<6>(rhs + j * kAmxTileCols, kRhsStride);
    if constexpr (kTwoRows) Tiles::template load<5>(lhs_next + j, lhs_stride);
    if constexpr (kTwoCols) Tiles::template load<7>(rhs_next + j * kAmxTileCols, kRhsStride);
    Tiles::template dpbf16ps<0, 4, 6>();
    if constexpr (kTwoCols) Tiles::template dpbf16ps<1, 4, 7>();
    if constexpr (kTwoRows) Tiles::template dpbf16ps<2, 5, 6>();
    if constexpr (kTwoRows && kTwoCols) Tiles::template dpbf16ps<3, 5, 7>();
  }
  finish_tile<Tiles, 0>(tiles[0], ldc, accumulate);
  if constexpr (kTwoCols) finish_tile<Tiles, 1>(tiles[1], ldc, accumulate);
  if constexpr (kTwoRows) finish_tile<Tiles, 2>(tiles[2], ldc, accumulate);
  if constexpr (kTwoRows && kTwoCols) finish_tile<Tiles, 3>(tiles[3], ldc, accumulate);
}

template <class Tiles>
void block_product(const BlockArgs& args) {
  const auto* lhs = static_cast<const uint32_t*>(args.lhs_block);
  const auto* rhs = static_cast<const uint32_t*>(args.rhs);
  float* out = static_cast<float*>(args.out);
  const int64_t Kp = amx_pairs(args.depth);
  const int64_t panels = ceil_div(args.rows, kAmxTileRows);
  const int64_t strips = ceil_div(args.cols, kAmxTileCols);
  amx::TileConfig config;
  for (int t = 0; t < amx::kTiles; ++t) config.set(t, amx::kMaxRows, amx::kMaxColsb);
  Tiles::configure(config);
  PrefetchCursor prefetch(args.next_rhs, ceil_div(panels, 2) * ceil_div(strips, 2));
  for (int64_t p = 0; p < panels; p += 2) {
    const bool two_rows = p + 1 < panels;
    for (int64_t s = 0; s < strips; s += 2) {
      const bool two_cols = s + 1 < strips;
      OutTile tiles[4];
      for (int t = 0; t < 4; ++t) {
        const int64_t r0 = (p + t / 2) * kAmxTileRows, c0 = (s + t % 2) * kAmxTileCols;
        tiles[t] = {out + r0 * args.ldc + c0, std::clamp<int64_t>(args.rows - r0, 0, kAmxTileRows),
                    std::clamp<int64_t>(args.cols - c0, 0, kAmxTileCols)};
      }
      const uint32_t* lhs_panel = lhs + p * kAmxTileRows * Kp;
      const uint32_t* rhs_strip = rhs + s * Kp * kAmxTileCols;
      if (two_rows && two_cols) {
        tile_block<Tiles, true, true>(lhs_panel, rhs_strip, Kp, tiles, args.ldc, args.accumulate);
      } else if (two_rows) {
        tile_block<Tiles, true, false>(lhs_panel, rhs_strip, Kp, tiles, args.ldc, args.accumulate);
      } else if (two_cols) {
        tile_block<Tiles, false, true>(lhs_panel, rhs_strip, Kp, tiles, args.ldc, args.accumulate);
      } else {
        tile_block<Tiles, false, false>(lhs_panel, rhs_strip, Kp, tiles, args.ldc, args.accumulate);
      }
      prefetch.step();
    }
  }
  // The tile state is large (8 KiB): handing it back keeps context switches of this thread cheap
  // between calls.
  Tiles::release();
}

}  // namespace

bool block_product_amx_bf16(const BlockArgs& args) {
  switch (cpu::tile_mode()) {
#if defined(__x86_64__)
    case cpu::TileMode::kHardware:
      if (!cpu::host_amx().bf16) return false;
      block_product<amx::HardwareTiles>(args);
      return true;
#endif
    case cpu::TileMode::kEmulated:
      block_product<amx::EmulatedTiles>(args);
      return true;
    default:
      return false;
  }
}

namespace {

bool has_tiles(bool on_hardware) {
  switch (cpu::tile_mode()) {
    case cpu::TileMode::kHardware:
      return on_hardware;
    case cpu::TileMode::kEmulated:
      return true;
    case cpu::TileMode::kNone:
      break;
  }
  return false;
}

}  // namespace

bool gemm_has_amx_bf16() { return has_tiles(cpu::host_amx().bf16); }
bool gemm_has_amx_int8() { return has_tiles(cpu::host_amx().int8); }

}  // namespace tokamax
