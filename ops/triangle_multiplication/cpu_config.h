// triangle_multiplication on CPU: the "cpu" implementation's config, invariants and heuristics.
//
// Dimensions.
//   N, C, H, D, P   as in base.h
//   tm     positions per task in the projection and output phases, rows of i per task in the
//          triangle product (tile_m)
#pragma once

#include <vector>

#include "backends/device.h"
#include "ops/common/cpu_gemm/task_config.h"
#include "ops/triangle_multiplication/base.h"

namespace tokamax {

// The GEMM engine's task config (task_config.h) with whole-row tasks (tile_n must be 0) and the
// f32 engine (bf16_path convert_f32: the kernel's intermediates are f32).
struct CpuTriangleConfig : GemmTaskConfig {
  CpuTriangleConfig() { tile_n = 0; }
  void validate() const;
};

void check_triangle_config(const CpuTriangleConfig& c, const Device& device);
CpuTriangleConfig cpu_triangle_heuristics_config(const TriangleMultiplicationProblem& p,
                                                 const Device& device);
std::vector<CpuTriangleConfig> cpu_triangle_autotuning_configs(
    const TriangleMultiplicationProblem& p, const Device& device);

}  // namespace tokamax
