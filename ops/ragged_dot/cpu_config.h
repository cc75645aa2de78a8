// ragged_dot on CPU: the "cpu" implementation's config, its invariants and its heuristics.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   tm, tn, tk   tile extents of M, N, K (tile_m, tile_n, tile_k); task_n columns per task
//   mr, nr       the micro-tile (mr rows x nr columns of accumulators in registers)
//   L            f32 lanes of the SIMD target (16 on AVX-512, 8 on AVX2)
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/framework/config.h"
#include "ops/framework/errors.h"
#include "ops/ragged_dot/base.h"

namespace tokamax {

struct CpuRaggedDotConfig {
  int tile_m = 1024;  // tm: rows of one task (never straddling two groups)
  int tile_n = 512;   // tn: columns of one packed rhs panel [tk, tn]; best a multiple of nr
  int tile_k = 256;   // tk: K block; the rhs panel stays in L2, an lhs micro-panel in L1
  int task_n = 0;     // columns of one task, a multiple of tile_n; 0 = all of N
  int mr = 14;        // micro-tile rows
  int nr = 32;        // micro-tile columns: nr / L vectors of the SIMD target
  std::string packing = "packed";         // "packed" | "no_pack" (rhs read in place)
  std::string bf16_path = "convert_f32";  // "convert_f32" | "native_dot" | "amx" (checks.h)
  // maybe_quantize_lhs with i8 rhs: "dequant_f32" (s * q times the dequantized weights, f32
  // FMAs) | "vnni" (int8 x int8 on vpdpbusd, mr x nr = 8x48 or 6x64) | "amx" (int8 x int8 on
  // AMX tiles, 32 x 32 blocks; mr and nr unused); ignored otherwise.
  std::string int8_path = "dequant_f32";
  int num_threads = 0;  // 0 = all cores

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("tile_m", tile_m);
    v("tile_n", tile_n);
    v("tile_k", tile_k);
    v("task_n", task_n);
    v("mr", mr);
    v("nr", nr);
    v("packing", packing);
    v("bf16_path", bf16_path);
    v("int8_path", int8_path);
    v("num_threads", num_threads);
  }
  auto key() const {
    return std::make_tuple(tile_m, tile_n, tile_k, task_n, mr, nr, packing, bf16_path, int8_path,
                           num_threads);
  }
};

// Scratch bound per thread for the f32 partial sums [tm, task_n] of a task; beyond it they are
// no longer a cache block and only waste memory.
inline constexpr int64_t kCpuMaxAccElements = int64_t{1} << 24;

// The largest group, in rows (0 without groups).
int64_t max_group_size(const RaggedDotProblem& p);
// bf16 lhs times bf16 rhs, or times f8e4m3 weights (decoded to bf16 exactly, their scales
// applied to the products; not with maybe_quantize_lhs), into a non-f64 output: the problems
// bf16_path=native_dot and amx can run.
bool is_bf16_problem(const RaggedDotProblem& p);
// maybe_quantize_lhs with i8 rhs, per column or in scale blocks of a multiple of 4 rows: the
// problems int8_path=vnni can run (on a CPU with avx512_vnni).
bool is_int8_problem(const RaggedDotProblem& p);
// Tiles larger than the problem only cost scratch: clamps them (tn to whole micro-tiles).
CpuRaggedDotConfig clamp_to_problem(CpuRaggedDotConfig c, const RaggedDotProblem& p);
// f32 partial sums a thread keeps for outputs that are not the accumulator type: [tm, task_n].
int64_t acc_elements(const RaggedDotProblem& p, const CpuRaggedDotConfig& c);

// The implementation's heuristics_config and autotuning_configs. Both return
// configs already clamped to the problem; `device` may be another machine (cross-tuning).
CpuRaggedDotConfig cpu_ragged_dot_heuristics_config(const RaggedDotProblem& p,
                                                    const Device& device);
std::vector<CpuRaggedDotConfig> cpu_ragged_dot_autotuning_configs(const RaggedDotProblem& p,
                                                                  const Device& device);

}  // namespace tokamax
