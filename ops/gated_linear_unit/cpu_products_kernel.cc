// gated_linear_unit on CPU: the products of the forward and of the backward's first phase, as
// tiles of cpu_gemm_tiles (ops/common/cpu_gemm/tiles.h), which packs each shared operand once:
// the x rows of a row tile when N has several column tiles (a token batch as one row tile with
// N in 8 tasks would pack x 8 times), the weight columns of a column tile when M has several row
// tiles (each row tile would re-pack all of W).
//
// Dimensions: as cpu_products_kernel.h (M, K, N, tm, tn).
#include "ops/gated_linear_unit/cpu_products_kernel.h"

namespace tokamax {

void glu_products(const GluProblem& p, const GluProductTiles& tiles,
                  // Inputs.
                  const Tensor& x, const GluWeights& weights,
                  // Outputs.
                  int64_t ld, const std::function<float*(const GluTask&, int part)>& dst,
                  const std::function<void(const GluTask&)>& epilogue, int64_t wave_bytes) {
  const int64_t M = p.M, K = p.K, N = p.N;
  if (M == 0 || N == 0) return;
  const bool whole_n = tiles.whole_n;
  const int64_t x_size = static_cast<int64_t>(dtype_size(p.x_dtype));
  const int64_t w_size = static_cast<int64_t>(dtype_size(p.w_dtype));
  const char* x_data = static_cast<const char*>(x.raw());
  const char* gate_data = static_cast<const char*>(weights.gate);
  const char* proj_data = static_cast<const char*>(weights.proj);
  // Products: whole_n, all of W [K, 2N] in one (its column tile is all 2N columns); otherwise
  // the gate (0) and projection (1) columns of the tile, both from the same x rows.
  GemmTileGrid grid;
  grid.rows = gemm_spans(M, tiles.tm);
  grid.cols = whole_n ? std::vector<GemmSpan>{{0, 2 * N}} : gemm_spans(N, tiles.tn);
  grid.K = K;
  grid.products = whole_n ? 1 : 2;
  grid.same_a = true;
  grid.gemm = tiles.gemm;
  grid.num_threads = tiles.num_threads;
  auto task = [&](int64_t i, int64_t j) {
    const GemmSpan r = grid.rows[i], c = grid.cols[j];
    return whole_n ? GluTask{r.begin, r.extent, 0, N}
                   : GluTask{r.begin, r.extent, c.begin, c.extent};
  };
  cpu_gemm_tiles(
      grid,
      [&](int64_t i, int) {
        return GemmOperand{p.x_dtype, x_data + grid.rows[i].begin * K * x_size, K, false};
      },
      [&](int64_t j, int part) {
        const char* base = part == 0 ? gate_data : proj_data;
        return GemmOperand{p.w_dtype, base + grid.cols[j].begin * w_size, weights.ld, false};
      },
      [&](int64_t i, int64_t j, int part) { return GemmOut{dst(task(i, j), part), ld}; },
      [&](int64_t i, int64_t j) { epilogue(task(i, j)); }, wave_bytes);
}

}  // namespace tokamax
