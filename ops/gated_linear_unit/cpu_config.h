// gated_linear_unit on CPU: the "cpu" implementation's config, its invariants and its heuristics.
//
// Dimensions.
//   M      rows of x, *B flattened
//   K      contraction extent
//   N      output features (gate and projection each have N columns)
//   tm     rows of x per task (tile_m)
//   tn     gate columns per task (tile_n; the task also computes the same tn projection columns)
//   tk     K block of the packed panels (tile_k)
//   pn     columns of one packed weight panel inside a task (panel_n)
//   mr, nr the micro-tile (mr rows x nr columns of f32 accumulators in registers)
//   L      f32 lanes of the SIMD target (16 on AVX-512, 8 on AVX2)
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/common/cpu_gemm/task_config.h"
#include "ops/framework/errors.h"
#include "ops/gated_linear_unit/base.h"

namespace tokamax {

// The GEMM engine's task config (task_config.h): tm rows of x per task (best a multiple of mr), tn
// gate columns per task (0 = all of N: one product of width 2N).
struct CpuGluConfig : GemmTaskConfig {
  CpuGluConfig() { tile_n = 0; }
  void validate() const;
};

// Per-thread f32 scratch bound for the gate and projection tiles [tm, 2 tn].
inline constexpr int64_t kCpuGluMaxScratchElements = int64_t{1} << 24;

// bf16 x and bf16 weights: the problems bf16_path=native_dot can run.
bool is_bf16_glu_problem(const GluProblem& p);
// Tiles larger than the problem only cost scratch: clamps them; tile_n >= N becomes 0 (all).
CpuGluConfig clamp_to_problem(CpuGluConfig c, const GluProblem& p);
// Gate columns of one task after clamping: N for tile_n = 0.
int64_t task_columns(const GluProblem& p, const CpuGluConfig& c);

// The implementation's heuristics_config and autotuning_configs. Both return configs already
// clamped to the problem; `device` may be another machine (cross-tuning).
CpuGluConfig cpu_glu_heuristics_config(const GluProblem& p, const Device& device);
std::vector<CpuGluConfig> cpu_glu_autotuning_configs(const GluProblem& p, const Device& device);

}  // namespace tokamax
