// ragged_dot_vjp on CPU: the "cpu" implementation's config, its invariants and its heuristics.
//
// Dimensions.
//   M, K, N, G   as vjp_base.h; rows_g the rows of group g
//   tm     rows of one task's product: dlhs rows of a group, or drhs rows (a K range)
//   tn     columns of one task's product: dlhs columns (a K range), or drhs columns (an N range)
//   tk     depth of the packed panels (the contraction blocked by the GEMM engine: N for dlhs,
//          rows_g for drhs)
//   pn     columns of one packed panel inside a task
//   mr, nr the micro-tile (mr rows x nr columns of f32 accumulators in registers)
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/ragged_dot/vjp_base.h"

namespace tokamax {

struct CpuRaggedDotVjpConfig {
  // tm: the most rows per task, each group cut evenly under it (tall tasks pack each panel once
  // for many rows).
  int tile_m = 252;
  int tile_n = 512;   // tn: columns per task
  int tile_k = 256;   // tk: depth of a packed panel; an lhs micro-panel [mr, tk] stays in L1
  int panel_n = 512;  // pn: columns of one packed panel [tk, pn]; stays in L2
  int mr = 14;        // micro-tile rows
  int nr = 32;        // micro-tile columns: nr / L vectors of the SIMD target
  std::string bf16_path = "convert_f32";  // "convert_f32" | "native_dot" | "amx" (checks.h)
  int num_threads = 0;                    // 0 = all cores

  void validate() const;
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

// Per-thread f32 scratch bound for one task's tile [tm, tn] (16-bit gradients are rounded from
// it).
inline constexpr int64_t kCpuRaggedDotVjpMaxScratch = int64_t{1} << 24;

// bf16 lhs, rhs and dout: the problems bf16_path native_dot and amx can run (both products).
bool is_bf16_vjp_problem(const RaggedDotVjpProblem& p);

// The implementation's heuristics_config and autotuning_configs; `device` may be another machine.
CpuRaggedDotVjpConfig cpu_ragged_dot_vjp_heuristics_config(const RaggedDotVjpProblem& p,
                                                           const Device& device);
std::vector<CpuRaggedDotVjpConfig> cpu_ragged_dot_vjp_autotuning_configs(
    const RaggedDotVjpProblem& p, const Device& device);

}  // namespace tokamax
