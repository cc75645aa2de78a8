// gated_linear_unit on CPU: the products of the forward and of the backward's first phase.
//
// Dimensions: as cpu_products_kernel.h (M, K, N, tm, tn); nm, nn the task counts along M and N.
//
// Operands that several tasks share are packed once, before those tasks: the x rows of a row
// tile when N has several column tiles (a token batch as one row tile with N in 8 tasks packed
// x 8 times: 5% of a llama-MLP call on Zen 3), the weight columns of a column tile when M has
// several row tiles (each row tile re-packed all of W). x in waves of row tiles, W in waves of
// column tiles within them, each under half of wave_bytes of packed operands. The packed
// buffers belong to the calling thread and are kept between calls (a fresh allocation per call
// would be zeroed page by page).
#include "ops/gated_linear_unit/cpu_products_kernel.h"

#include <algorithm>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/micro_tile.h"

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
  const int64_t tm = tiles.tm, tn = whole_n ? N : tiles.tn;
  const int64_t nm = ceil_div(M, tm), nn = ceil_div(N, tn);
  const CpuGemmOptions& gemm = tiles.gemm;
  const int64_t nr = int64_t{std::max(gemm.nr_vectors, 1)} * cpu::simd_f32_lanes();
  const int num_threads = tiles.num_threads;
  const size_t x_size = dtype_size(p.x_dtype), w_size = dtype_size(p.w_dtype);
  const char* x_data = static_cast<const char*>(x.raw());
  const char* gate_data = static_cast<const char*>(weights.gate);
  const char* proj_data = static_cast<const char*>(weights.proj);

  auto x_rows = [&](int64_t m0) {
    return GemmOperand{p.x_dtype, x_data + m0 * K * static_cast<int64_t>(x_size), K, false};
  };
  // The B operands of column tile n_i: all of W [K, 2N] (whole_n), or the gate then the
  // projection columns [n0, n0 + cols).
  auto w_columns = [&](int64_t n_i, int part) {
    const char* base = whole_n ? gate_data : (part == 0 ? gate_data : proj_data);
    return GemmOperand{p.w_dtype, base + n_i * tn * static_cast<int64_t>(w_size), weights.ld,
                       false};
  };
  const int64_t parts = whole_n ? 1 : 2;
  auto w_cols = [&](int64_t n_i) { return whole_n ? 2 * N : std::min(tn, N - n_i * tn); };
  const bool share_x = nn > 1 && K > 0, share_w = nm > 1 && K > 0;
  const int64_t half_budget = std::max<int64_t>(wave_bytes / 2, 1);
  const int64_t x_tile_bytes = round_up(tm, gemm.mr) * round_up(K, gemm.tk) * 4;
  const int64_t w_tile_bytes = parts * round_up(w_cols(0), nr) * round_up(K, gemm.tk) * 4;
  const int64_t x_wave =
      share_x ? std::clamp<int64_t>(half_budget / std::max<int64_t>(x_tile_bytes, 1), 1, nm) : nm;
  const int64_t w_wave =
      share_w ? std::clamp<int64_t>(half_budget / std::max<int64_t>(w_tile_bytes, 1), 1, nn) : nn;
  thread_local std::vector<std::vector<float>> x_storage_of_caller, w_storage_of_caller;
  thread_local std::vector<PackedGemmOperand> x_packed_of_caller, w_packed_of_caller;
  std::vector<std::vector<float>>& x_storage = x_storage_of_caller;
  std::vector<std::vector<float>>& w_storage = w_storage_of_caller;
  std::vector<PackedGemmOperand>& x_packed = x_packed_of_caller;
  std::vector<PackedGemmOperand>& w_packed = w_packed_of_caller;
  if (share_x && static_cast<int64_t>(x_packed.size()) < x_wave) {
    x_packed.resize(static_cast<size_t>(x_wave));
    x_storage.resize(static_cast<size_t>(x_wave));
  }
  if (share_w && static_cast<int64_t>(w_packed.size()) < parts * w_wave) {
    w_packed.resize(static_cast<size_t>(parts * w_wave));
    w_storage.resize(static_cast<size_t>(parts * w_wave));
  }

  for (int64_t x0 = 0; x0 < nm; x0 += x_wave) {
    const int64_t x_tiles = std::min(x_wave, nm - x0);
    if (share_x) {
      cpu::parallel_for(x_tiles, num_threads, [&](int64_t t, int) {
        const int64_t m0 = (x0 + t) * tm;
        x_packed[t] = pack_gemm_lhs(x_rows(m0), std::min(tm, M - m0), K, gemm, x_storage[t]);
      });
    }
    for (int64_t w0 = 0; w0 < nn; w0 += w_wave) {
      const int64_t w_tiles = std::min(w_wave, nn - w0);
      if (share_w) {
        cpu::parallel_for(parts * w_tiles, num_threads, [&](int64_t i, int) {
          const int64_t n_i = w0 + i / parts;
          w_packed[i] = pack_gemm_rhs(w_columns(n_i, static_cast<int>(i % parts)), K, w_cols(n_i),
                                      gemm, w_storage[i]);
        });
      }
      // Row tiles outer, column tiles inner: consecutive tasks of one thread share the x rows.
      cpu::parallel_for(x_tiles * w_tiles, num_threads, [&](int64_t task, int) {
        const int64_t x_i = task / w_tiles, w_i = task % w_tiles;
        const int64_t m0 = (x0 + x_i) * tm, rows = std::min(tm, M - m0);
        const int64_t n_i = w0 + w_i, n0 = n_i * tn, cols = std::min(tn, N - n0);
        const GluTask t{m0, rows, n0, cols};
        // Part j of the task's product, each side packed ahead or here.
        for (int j = 0; j < parts; ++j) {
          float* out = dst(t, j);
          const int64_t width = w_cols(n_i);
          if (share_x && share_w) {
            cpu_gemm_f32(x_packed[x_i], w_packed[w_i * parts + j], out, ld, false, gemm);
          } else if (share_x) {
            cpu_gemm_f32(x_packed[x_i], w_columns(n_i, j), width, out, ld, false, gemm);
          } else if (share_w) {
            cpu_gemm_f32(x_rows(m0), w_packed[w_i * parts + j], rows, out, ld, false, gemm);
          } else {
            cpu_gemm_f32(x_rows(m0), w_columns(n_i, j), rows, width, K, out, ld, false, gemm);
          }
        }
        epilogue(t);
      });
    }
  }
}

}  // namespace tokamax
