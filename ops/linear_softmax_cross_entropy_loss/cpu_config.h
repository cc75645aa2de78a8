// linear_softmax_cross_entropy_loss on CPU: the "cpu" implementation's config, its heuristics and
// search space (cpu_config.cc).
//
// Dimensions.
//   B, H, V      rows, hidden size, vocabulary size (see base.h)
//   tb, tv       row tile (tile_b) and logits chunk (chunk_v): the logits tile is [tb, tv] f32
//   tn, tk       the GEMM's packed w panel [tk, tn] (tile_k, tile_n)
//   nv           V ranges (v_splits): tasks are (row tile, V range) pairs
//   mr, nr       the GEMM micro-tile (mr rows x nr columns of accumulators in registers)
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/linear_softmax_cross_entropy_loss/base.h"

namespace tokamax {

struct CpuLsceConfig {
  int tile_b = 256;    // tb: rows per task; w is streamed once per row tile
  int chunk_v = 2048;  // tv: logits columns per GEMM tile, reduced right away
  int tile_n = 256;    // columns of one packed w panel [tile_k, tile_n] inside the GEMM tile
  int tile_k = 256;    // K block of the GEMM (depth of the packed panels)
  int v_splits = 0;    // nv: V ranges per row tile; 0 = enough tasks for every thread
  int mr = 0;          // micro-tile rows; 0 (with nr = 0) = this CPU's first shape
  int nr = 0;          // micro-tile columns, a multiple of the f32 lanes
  std::string bf16_path = "convert_f32";  // "convert_f32" | "native_dot" | "amx" (checks.h)
  int num_threads = 0;                    // 0 = all cores

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("tile_b", tile_b);
    v("chunk_v", chunk_v);
    v("tile_n", tile_n);
    v("tile_k", tile_k);
    v("v_splits", v_splits);
    v("mr", mr);
    v("nr", nr);
    v("bf16_path", bf16_path);
    v("num_threads", num_threads);
  }
  auto key() const {
    return std::make_tuple(tile_b, chunk_v, tile_n, tile_k, v_splits, mr, nr, bf16_path,
                           num_threads);
  }
};

// Bound on the per-thread logits tile [tb, tv] f32 (64 MB): past L2 it only wastes memory.
inline constexpr int64_t kCpuLsceMaxLogitsTile = int64_t{1} << 24;

// bf16 x and bf16 w: the problems bf16_path=native_dot can run.
bool is_lsce_bf16_problem(const LinearSoftmaxCrossEntropyProblem& p);

CpuLsceConfig cpu_lsce_heuristics_config(const LinearSoftmaxCrossEntropyProblem& p,
                                         const Device& device);
std::vector<CpuLsceConfig> cpu_lsce_autotuning_configs(const LinearSoftmaxCrossEntropyProblem& p,
                                                       const Device& device);

}  // namespace tokamax
