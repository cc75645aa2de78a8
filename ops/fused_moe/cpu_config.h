// fused_moe on CPU: the "cpu" implementation's config, its invariants and its heuristics.
//
// Dimensions.
//   T, H, E, I, k   as in base.h
//   tm     routes of one expert per task (tile_m)
//   tk     K block of the packed panels (tile_k)
//   pn     columns of one packed weight panel (panel_n)
//   mr, nr the micro-tile
#pragma once

#include <vector>

#include "backends/device.h"
#include "ops/common/cpu_gemm/task_config.h"
#include "ops/fused_moe/base.h"

namespace tokamax {

// The GEMM engine's task config (task_config.h). A task is up to tm routes of one expert through
// both products, whole rows (tile_n must be 0). bf16_path: the engine of both products (with a
// bf16 engine the activation is rounded to bf16 before the down product, as the error model
// allows).
struct CpuFusedMoeConfig : GemmTaskConfig {
  CpuFusedMoeConfig() { tile_n = 0; }
  void validate() const;
};

// Per-thread f32 scratch bound of a task: tm x (2 I + I + H).
inline constexpr int64_t kCpuFusedMoeMaxScratchElements = int64_t{1} << 24;

// Throws InvalidConfig when a task's scratch exceeds the bound for this problem.
void check_fused_moe_config(const FusedMoeProblem& p, const CpuFusedMoeConfig& c,
                            const Device& device);
// The implementation's heuristics_config and autotuning_configs; `device` may be another machine.
CpuFusedMoeConfig cpu_fused_moe_heuristics_config(const FusedMoeProblem& p, const Device& device);
std::vector<CpuFusedMoeConfig> cpu_fused_moe_autotuning_configs(const FusedMoeProblem& p,
                                                                const Device& device);

}  // namespace tokamax
