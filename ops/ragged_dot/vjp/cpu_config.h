// ragged_dot_vjp on CPU: the "cpu" implementation's config, its invariants and its heuristics.
//
// Dimensions.
//   M, K, N, G   as base.h; rows_g the rows of group g
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
#include "ops/common/cpu_gemm/task_config.h"
#include "ops/ragged_dot/vjp/base.h"

namespace tokamax {

// The GEMM engine's task config (task_config.h): tm the most rows per task, each group cut
// evenly under it (tall tasks pack each panel once for many rows).
struct CpuRaggedDotVjpConfig : GemmTaskConfig {
  void validate() const;
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
