// Tiled products on the thread pool with shared operands packed once: C tiles of a grid of row
// tiles and column tiles, each task one tile of every product, for the ops whose kernels split
// a big product (or several with the same grid) into tasks: gated_linear_unit's x W and its
// backward's three phases.
//
// Dimensions.
//   M, N   rows and columns of the grid (row tiles partition M, column tiles N)
//   K      contraction extent of every product
//   P      products per tile (summed into one output, or each into its own)
//
// A task computes its tile of each product with the whole contraction (no two tasks write one
// element, nothing is reduced afterwards). When a row tile is read by several column tiles, its
// A rows are packed once before their tasks; when a column tile is read by several row tiles,
// its B columns likewise. Packed operands are held in waves: row tiles in waves, and column
// tiles in waves within each, each side under half of wave_bytes (one tile at least), so the
// packing stays bounded whatever M and N are. The packed buffers belong to the calling thread
// and are kept between calls (a fresh allocation per call would be zeroed page by page).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ops/common/cpu_gemm/gemm.h"

namespace tokamax {

// The most bytes of operands packed ahead of the tasks at once (half per side).
inline constexpr int64_t kGemmTilesWaveBytes = int64_t{64} << 20;

// A run [begin, begin + extent) of rows or columns.
struct GemmSpan {
  int64_t begin = 0, extent = 0;
};

struct GemmTileGrid {
  std::vector<GemmSpan> rows, cols;  // row tiles (of M) and column tiles (of N)
  int64_t K = 0;
  int products = 1;
  bool sum_products = false;  // products p > 0 accumulate into product 0's output
  bool same_a = false;        // every product's A is a(i, 0): packed once, not once per product
  CpuGemmOptions gemm;
  int num_threads = 0;  // 0 = all cores
};

// An f32 output tile: element (r, c) of the tile at c[r * ldc + c].
struct GemmOut {
  float* c = nullptr;
  int64_t ldc = 0;
};

// Runs every task (row tile i, column tile j): for each product p, C_p = A_p(i) B_p(j) written
// (overwritten) to out(i, j, p), or with sum_products summed into out(i, j, 0); then
// epilogue(i, j) (may be empty). a(i, p) is the A operand whose first row is row tile i's first
// ([rows, K]; transposed allowed), b(j, p) the B operand whose first column is column tile j's
// first ([K, cols]). out and epilogue run on the task's thread.
void cpu_gemm_tiles(const GemmTileGrid& grid,
                    const std::function<GemmOperand(int64_t i, int p)>& a,
                    const std::function<GemmOperand(int64_t j, int p)>& b,
                    const std::function<GemmOut(int64_t i, int64_t j, int p)>& out,
                    const std::function<void(int64_t i, int64_t j)>& epilogue,
                    int64_t wave_bytes = kGemmTilesWaveBytes);

// One operand packed ahead of the tasks that share it: A [extent, K] (is_lhs) or B [K, extent]
// read from `source`. extent 0: an empty slot (nothing packed, nothing read).
struct GemmPackRequest {
  GemmOperand source;
  bool is_lhs = false;
  int64_t extent = 0, K = 0;
};

// Packs requests[k] into storage[k] for `options` and returns the packed operands in order.
// storage is the caller's, kept between calls (a thread_local: fresh buffers would be zeroed
// page by page every call), grown to requests.size() slots and each slot as needed, never
// shrunk; every piece of every operand (gemm.h: an A K block, a B panel) is a task of its own on
// the pool, so that operands of different sizes still keep every core packing (packed one
// operand per thread, the backward GLU's dx phase left one core packing a 20 MiB tile of W^T
// while the other waited for it).
std::vector<PackedGemmOperand> pack_gemm_operands(const std::vector<GemmPackRequest>& requests,
                                                  const CpuGemmOptions& options, int num_threads,
                                                  std::vector<GemmPackStorage>& storage);

// `extent` cut into tiles of at most `tile` (the last one shorter).
std::vector<GemmSpan> gemm_spans(int64_t extent, int64_t tile);

}  // namespace tokamax
