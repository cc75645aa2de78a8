// The "cpu" config of an op that runs its products as tasks on the GEMM engine
// (gated_linear_unit, its VJP, ragged_dot_vjp): one set of JSON keys, one validation and one
// cache-derived blocking for all of them.
//
// Dimensions.
//   tm, tn   rows and columns of one task (tile_m, tile_n)
//   tk       the K block (tile_k): an lhs micro-panel [mr, tk] stays in L1
//   pn       columns of one packed panel [tk, pn] (panel_n): it stays in L2
//   mr, nr   the micro-tile (mr rows x nr columns of accumulators in registers)
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <tuple>

#include "backends/cpu/cpu_info.h"

namespace tokamax {

struct GemmTaskConfig {
  int tile_m = 252;                       // tm
  int tile_n = 512;                       // tn
  int tile_k = 256;                       // tk
  int panel_n = 512;                      // pn
  int mr = 14;                            // micro-tile rows
  int nr = 32;                            // micro-tile columns: nr / L vectors of the SIMD target
  std::string bf16_path = "convert_f32";  // "convert_f32" | "native_dot" | "amx" (checks.h)
  int num_threads = 0;                    // 0 = all cores

  template <class V>
  void visit(V&& v) {
    v("tile_m", tile_m);
    v("tile_n", tile_n);
    v("tile_k", tile_k);
    v("panel_n", panel_n);
    v("mr", mr);
    v("nr", nr);
    v("bf16_path", bf16_path);
    v("num_threads", num_threads);
  }
  auto key() const {
    return std::make_tuple(tile_m, tile_n, tile_k, panel_n, mr, nr, bf16_path, num_threads);
  }
};

// What a client's validation adds to the ranges every client shares.
struct GemmTaskLimits {
  bool tile_n_zero_is_all = false;         // tile_n = 0 means every column in one task
  int scratch_columns_per_tn = 1;          // a task's f32 scratch is [tm, this * tn]
  int64_t max_scratch = int64_t{1} << 24;  // f32 elements of that scratch
};

// Throws InvalidConfig naming the field: tm, tn, tk, pn in [1, 65536] (tn also 0 where the
// limits allow), mr in [1, 64], nr in [1, 256], the task's scratch within its bound, a known
// bf16 path, num_threads >= 0.
void validate_gemm_task_config(const GemmTaskConfig& c, const GemmTaskLimits& limits);

// The engine's blocking on `device`: its first (squarest) micro-tile; tk so that an lhs
// micro-panel [mr, tk] fills at most half of L1 (reread for every strip: a multiple of 32 in
// [32, 512]); pn so that a packed panel [min(tk, depth), pn] fills at most half of L2 (reread by
// every micro-panel: whole micro-tiles, at most 4096). `depth` is the contraction when it may
// be shorter than tk (at least 1).
void set_engine_blocking(GemmTaskConfig& c, const cpu::CpuInfo& device,
                         int64_t depth = std::numeric_limits<int64_t>::max());

// Large tasks for a client whose every task packs its own panels (after set_engine_blocking): a
// task packs its rows once per tn columns and its panel columns once per tm rows, so about 500
// rows (whole micro-panels; fewer where `rows`, the longest run of rows a task may take, is
// shorter) by at least 512 columns and two panels (whole panels). Measured against smaller tasks
// in docs/measurement_log.md ("GEMM task shapes").
void set_large_tasks(GemmTaskConfig& c, int64_t rows);

}  // namespace tokamax
