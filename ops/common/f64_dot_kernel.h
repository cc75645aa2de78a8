// The float64 dot-rows kernels (f64_dot_kernel.cc, compiled once per SIMD target): the
// micro-kernel of a dense tile and the dot product of one point.
//
// Dimensions.
//   kc     the K extent of one block of a dense tile
//   mr, nr the micro-tile: mr rows of a x nr rows of b (nr = nr_vectors * L)
//   L      f64 lanes of one vector of the dispatched target (AVX-512: 8, AVX2: 4)
//
// Packed layouts (f64_dot.cc packs them, zero-padded to whole micro-tiles):
//   a panel   [K][2 mr]: per k, the mr values of rows p*mr.. of a tile, then their absolute
//             values (the broadcast operands of the value and magnitude FMAs)
//   b strip   [K][nr] values: rows s*nr.. of b, k-major (the kernel takes their |.| itself)
#pragma once

#include <cstdint>

namespace tokamax {

// The micro-tile of the dispatched target.
struct F64TileShape {
  int mr = 0;
  int nr = 0;
};
F64TileShape f64_tile_shape();

// One K block of a dense tile: every (panel, strip) pair. Each output continues its running sum
// in k order: accumulate = true loads it from value / magnitude first (later K blocks), false
// starts from zero.
struct F64BlockArgs {
  // Inputs.
  const double* a_panels;  // [panels][K][2 mr], at k0 of this block; panel stride a_stride
  int64_t a_stride;        // doubles from one panel to the next: 2 K mr
  int64_t rows;            // rows of the tile (<= panels * mr)
  const double* b_strips;  // [strips][K][nr], at k0 of this block; strip stride b_stride
  int64_t b_stride;        // doubles from one strip to the next: K nr
  int64_t cols;            // b rows of the tile (<= strips * nr)
  int64_t kc;              // the K extent of this block
  // Outputs.
  double* value;      // [rows, cols], row stride ldc
  double* magnitude;  // [rows, cols], row stride ldc; null: not computed
  int64_t ldc;
  bool accumulate;
};
void f64_block_product(const F64BlockArgs& args);

// value = sum_k a[k] b[k] and (magnitude non-null) *magnitude = sum_k |a[k] b[k]|, K terms.
void f64_dot(const double* a, const double* b, int64_t K, double* value, double* magnitude);

}  // namespace tokamax
