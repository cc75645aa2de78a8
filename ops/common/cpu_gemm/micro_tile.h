// The CPU GEMM engine's register-blocked micro-tiles, in plain integers: the shapes the
// micro-kernels instantiate per register file, and the rounding helpers of tiling math.
//
// Dimensions.
//   mr, nr   the micro-tile: mr rows x nr = nr_vectors * L columns of accumulators
//   L        f32 lanes of one vector of the SIMD target
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>

namespace tokamax {

inline constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline constexpr int64_t round_up(int64_t a, int64_t multiple) {
  return ceil_div(a, multiple) * multiple;
}
// The tile that cuts `extent` into as few tiles of at most `max_tile` as possible, all of about
// one size (rounded up to `multiple`), so that no sliver is left at the end: 512 rows under a
// 504-row cap are tiles of 258 and 254, not 504 and an 8-row tile that repacks a whole operand
// for 8 rows. At most max_tile when max_tile is a multiple of `multiple`.
inline constexpr int64_t even_tile(int64_t extent, int64_t max_tile, int64_t multiple) {
  if (extent <= 0 || max_tile <= 0) return max_tile > 0 ? max_tile : 1;
  const int64_t fitted = round_up(ceil_div(extent, ceil_div(extent, max_tile)), multiple);
  return fitted < max_tile ? fitted : max_tile;
}

// The last micro-panel of a block with fewer rows than mr runs a tail tile of the next multiple
// of this many accumulator rows (up to 2 * kTailRowStep; dispatch_tile_rows), so row tiles cut in
// multiples of it waste no multiply-adds on padding rows: 512 rows as 256 + 256 in panels of 14
// are 18 panels and a 4-row tail each, where 266 + 246 (multiples of 14) left one 8-row tail.
inline constexpr int kTailRowStep = 4;

// Runs body(std::integral_constant<int, R>{}) with R the accumulator rows of the tile for `rows`
// rows of an MR-row micro-panel: the smallest of kTailRowStep and 2 * kTailRowStep that holds
// them when it is below MR, else MR. Each micro-kernel instantiates its tile for every R.
template <int MR, typename Body>
inline void dispatch_tile_rows(int64_t rows, Body&& body) {
  if constexpr (kTailRowStep < MR) {
    if (rows <= kTailRowStep) return body(std::integral_constant<int, kTailRowStep>{});
  }
  if constexpr (2 * kTailRowStep < MR) {
    if (rows <= 2 * kTailRowStep) return body(std::integral_constant<int, 2 * kTailRowStep>{});
  }
  body(std::integral_constant<int, MR>{});
}

// A register-blocked micro-tile: mr rows x nr_vectors vectors of accumulators.
struct MicroKernelShape {
  int mr = 0;
  int nr_vectors = 0;
  bool operator==(const MicroKernelShape&) const = default;
};

// The shapes the kernels instantiate, best first, by register file. mr * nr_vectors accumulators
// plus nr_vectors rhs vectors plus one broadcast lhs value must fit without spilling.
// 32 vector registers (AVX-512): 14x2 keeps 28 accumulators, 2 rhs vectors and a broadcast in 31
// registers and needs 16 loads per 28 FMAs, well under the two vector loads per cycle a core
// sustains; the others trade rows for columns, for groups of few rows (less zero padding).
inline constexpr MicroKernelShape kShapes32Registers[] = {{14, 2}, {8, 3}, {6, 4}, {4, 4}};
// 16 vector registers (AVX2, SSE4): 12 accumulators + rhs + broadcast.
inline constexpr MicroKernelShape kShapes16Registers[] = {{6, 2}, {4, 3}, {4, 2}};
// Scalar fallback (16 xmm registers): 9 independent chains, no spills.
inline constexpr MicroKernelShape kShapesScalar[] = {{3, 3}, {2, 4}};

// The shapes for vectors of `lanes` f32 lanes: 16 lanes come with 32 registers (AVX-512), 4-8
// with 16 (AVX2, SSE4), 1 is the portable scalar fallback. constexpr: the kernels instantiate
// exactly this list for their own width at compile time.
constexpr std::span<const MicroKernelShape> micro_kernel_shapes(int lanes) {
  if (lanes >= 16) return kShapes32Registers;
  if (lanes >= 2) return kShapes16Registers;
  return kShapesScalar;
}
constexpr bool has_micro_kernel_shape(int lanes, int mr, int nr_vectors) {
  for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
    if (shape == MicroKernelShape{mr, nr_vectors}) return true;
  }
  return false;
}

}  // namespace tokamax
