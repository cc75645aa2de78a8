// ragged_dot on CPU for the other dimension numbers (base.h, RaggedDims): trans_rhs (each
// group's rhs [N, K] read transposed) and ragged_contracting (out[g] = lhs_g^T rhs_g over group
// g's rows of K), as tasks of the shared GEMM engine (ops/common/cpu_gemm/gemm.h) that reads
// either operand transposed in its packing, the forms ragged_dot_vjp's two products take.
//
// Dimensions: as base.h; a task is tm rows (of M) by task_n columns (0: all of N) of one group.
#pragma once

#include <vector>

#include "backends/device.h"
#include "ops/framework/tensor.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/cpu_config.h"

namespace tokamax {

// The config fields these forms use (tile_m, tile_n as the packed panel width, tile_k, task_n,
// mr, nr, bf16_path, num_threads) from the default form's heuristics, with tasks sized for their
// rows: M per group (ragged_contracting) or the group's rows (trans_rhs).
CpuRaggedDotConfig cpu_general_heuristics_config(const RaggedDotProblem& p, const Device& device);
// The default form's search space with packing=packed (these forms always pack).
std::vector<CpuRaggedDotConfig> cpu_general_autotuning_configs(const RaggedDotProblem& p,
                                                               const Device& device);

// Every output element written (rows outside the groups and empty groups' out[g] zero), f32
// accumulators rounded once. Throws NotImplemented for f64 (the engine accumulates in f32).
void ragged_dot_general_cpu_kernel(const RaggedDotProblem& p, const CpuRaggedDotConfig& c,
                                   // Inputs.
                                   const Tensor& lhs,  // [M, K] or [K, M]
                                   const Tensor& rhs,  // [G, N, K] or [K, N]
                                   // Outputs.
                                   Tensor& out);  // [M, N] or [G, M, N]

}  // namespace tokamax
