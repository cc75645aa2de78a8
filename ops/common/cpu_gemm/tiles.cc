// Tiled products on the thread pool with shared operands packed once (tiles.h).
//
// Dimensions: as tiles.h (M, N, K, P); nm, nn the row and column tile counts.
#include "ops/common/cpu_gemm/tiles.h"

#include <algorithm>
#include <utility>

#include "backends/cpu/cpu_info.h"
#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/micro_tile.h"

namespace tokamax {

std::vector<GemmSpan> gemm_spans(int64_t extent, int64_t tile) {
  std::vector<GemmSpan> spans;
  const int64_t step = std::max<int64_t>(tile, 1);
  for (int64_t begin = 0; begin < extent; begin += step) {
    spans.push_back({begin, std::min(step, extent - begin)});
  }
  return spans;
}

namespace {

// A core's L2 (1 MiB when the CPU does not say).
int64_t l2_bytes() {
  const int64_t l2 = cpu::host_cpu().l2_bytes;
  return l2 > 0 ? l2 : int64_t{1} << 20;
}

}  // namespace

std::vector<PackedGemmOperand> pack_gemm_operands(const std::vector<GemmPackRequest>& requests,
                                                  const CpuGemmOptions& options, int num_threads,
                                                  std::vector<GemmPackStorage>& storage) {
  if (storage.size() < requests.size()) storage.resize(requests.size());
  std::vector<PackedGemmOperand> packed(requests.size());
  std::vector<std::pair<size_t, int64_t>> pieces;  // (request, piece)
  int64_t packed_bytes = 0;
  for (size_t k = 0; k < requests.size(); ++k) {
    const GemmPackRequest& r = requests[k];
    if (r.extent <= 0) continue;  // an empty slot stays a default operand
    packed[k] = r.is_lhs ? reserve_gemm_lhs(r.extent, r.K, options, storage[k])
                         : reserve_gemm_rhs(r.K, r.extent, options, storage[k]);
    packed_bytes += r.extent * r.K * (options.engine == GemmEngine::kF32Fma ? 4 : 2);
    for (int64_t piece = 0, n = gemm_pack_pieces(packed[k]); piece < n; ++piece) {
      pieces.emplace_back(k, piece);
    }
  }
  // Operands larger together than a core's L2 are read by their tasks only after every piece is
  // packed, by then from L3 or memory whatever the stores did: packed with non-temporal stores,
  // which skip reading each line before writing it (measured: docs/measurement_log.md,
  // "non-temporal packing").
  const bool stream = packed_bytes > l2_bytes();
  cpu::parallel_for(static_cast<int64_t>(pieces.size()), num_threads, [&](int64_t t, int) {
    const auto [k, piece] = pieces[static_cast<size_t>(t)];
    pack_gemm_piece(requests[k].source, packed[k], piece, stream);
  });
  return packed;
}

void cpu_gemm_tiles(const GemmTileGrid& grid,
                    const std::function<GemmOperand(int64_t i, int p)>& a,
                    const std::function<GemmOperand(int64_t j, int p)>& b,
                    const std::function<GemmOut(int64_t i, int64_t j, int p)>& out,
                    const std::function<void(int64_t i, int64_t j)>& epilogue,
                    int64_t wave_bytes) {
  const int64_t nm = static_cast<int64_t>(grid.rows.size());
  const int64_t nn = static_cast<int64_t>(grid.cols.size());
  if (nm == 0 || nn == 0) return;
  const int64_t K = grid.K, P = grid.products;
  const CpuGemmOptions& gemm = grid.gemm;
  const int num_threads = grid.num_threads;
  const int64_t mr = std::max(gemm.mr, 1);
  const int64_t nr = int64_t{std::max(gemm.nr_vectors, 1)} * cpu::simd_f32_lanes();
  const bool share_a = nn > 1 && K > 0, share_b = nm > 1 && K > 0;

  // Waves: as many tiles of each side as fit in half of wave_bytes of packed f32 (the widest
  // tile of the side counts for all; one tile at least).
  const int64_t half_budget = std::max<int64_t>(wave_bytes / 2, 1);
  const int64_t depth = round_up(K, std::max<int64_t>(gemm.tk, 1));
  int64_t widest_rows = 0, widest_cols = 0;
  for (const GemmSpan& s : grid.rows) widest_rows = std::max(widest_rows, s.extent);
  for (const GemmSpan& s : grid.cols) widest_cols = std::max(widest_cols, s.extent);
  const int64_t PA = grid.same_a ? 1 : P;  // distinct A operands per row tile
  const int64_t a_tile_bytes = PA * round_up(widest_rows, mr) * depth * 4;
  const int64_t b_tile_bytes = P * round_up(widest_cols, nr) * depth * 4;
  const int64_t a_wave =
      share_a ? std::clamp<int64_t>(half_budget / std::max<int64_t>(a_tile_bytes, 1), 1, nm) : nm;
  const int64_t b_wave =
      share_b ? std::clamp<int64_t>(half_budget / std::max<int64_t>(b_tile_bytes, 1), 1, nn) : nn;
  // Packing storage kept between calls (the loop bodies reach it through these references).
  thread_local std::vector<GemmPackStorage> a_storage_of_caller, b_storage_of_caller;
  std::vector<GemmPackStorage>& a_storage = a_storage_of_caller;
  std::vector<GemmPackStorage>& b_storage = b_storage_of_caller;
  std::vector<PackedGemmOperand> a_packed, b_packed;

  for (int64_t a0 = 0; a0 < nm; a0 += a_wave) {
    const int64_t a_tiles = std::min(a_wave, nm - a0);
    if (share_a) {
      std::vector<GemmPackRequest> requests;
      for (int64_t k = 0; k < PA * a_tiles; ++k) {
        const int64_t i = a0 + k / PA;
        requests.push_back({a(i, static_cast<int>(k % PA)), true, grid.rows[i].extent, K});
      }
      a_packed = pack_gemm_operands(requests, gemm, num_threads, a_storage);
    }
    for (int64_t b0 = 0; b0 < nn; b0 += b_wave) {
      const int64_t b_tiles = std::min(b_wave, nn - b0);
      if (share_b) {
        std::vector<GemmPackRequest> requests;
        for (int64_t k = 0; k < P * b_tiles; ++k) {
          const int64_t j = b0 + k / P;
          requests.push_back({b(j, static_cast<int>(k % P)), false, grid.cols[j].extent, K});
        }
        b_packed = pack_gemm_operands(requests, gemm, num_threads, b_storage);
      }
      // Row tiles outer, column tiles inner: consecutive tasks of one thread share the A rows.
      cpu::parallel_for(a_tiles * b_tiles, num_threads, [&](int64_t task, int) {
        const int64_t ai = task / b_tiles, bj = task % b_tiles;
        const int64_t i = a0 + ai, j = b0 + bj;
        const int64_t rows = grid.rows[i].extent, cols = grid.cols[j].extent;
        GemmOut o;
        for (int p = 0; p < P; ++p) {
          const bool accumulate = grid.sum_products && p > 0;
          if (!accumulate) o = out(i, j, p);
          const int pa_index = grid.same_a ? 0 : p;
          const PackedGemmOperand* pa = share_a ? &a_packed[ai * PA + pa_index] : nullptr;
          const PackedGemmOperand* pb = share_b ? &b_packed[bj * P + p] : nullptr;
          if (pa && pb) {
            cpu_gemm_f32(*pa, *pb, o.c, o.ldc, accumulate, gemm);
          } else if (pa) {
            cpu_gemm_f32(*pa, b(j, p), cols, o.c, o.ldc, accumulate, gemm);
          } else if (pb) {
            cpu_gemm_f32(a(i, pa_index), *pb, rows, o.c, o.ldc, accumulate, gemm);
          } else {
            cpu_gemm_f32(a(i, pa_index), b(j, p), rows, cols, K, o.c, o.ldc, accumulate, gemm);
          }
        }
        if (epilogue) epilogue(i, j);
      });
    }
  }
}

}  // namespace tokamax
