// gated_linear_unit_vjp on CPU: the "cpu" implementation's config, its invariants and heuristics.
//
// Dimensions.
//   M, K, N   as base.h; H [M, 2N] = [dg | dp]
//   tm     rows per task: of H and dx (phases 1 and 2), of the weight gradients (a K range, phase
//   3) tn     columns per task: of the gate and projection (phase 1: H), of dx (a K range, phase
//   2),
//          of one weight gradient (phase 3: dweights = x^T H)
//   tk     depth of the packed panels; pn columns of one packed panel
//   mr, nr the micro-tile
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "backends/device.h"
#include "ops/common/cpu_gemm/task_config.h"
#include "ops/gated_linear_unit/vjp/base.h"

namespace tokamax {

// The GEMM engine's task config (task_config.h): tm the most rows of a tile (the kernel cuts M,
// and K for dW, evenly under it). bf16 x and bf16 weights: bf16_path "convert_f32" widens every
// bf16 operand to f32 while packing and keeps H in f32; "native_dot" (vdpbf16ps) and "amx" (AMX
// tiles) multiply bf16 in all three products (the forward's bf16_path), H rounded to bf16 for
// the last two (glu_vjp_h_roundoff).
struct CpuGluVjpConfig : GemmTaskConfig {
  CpuGluVjpConfig() { tile_n = 288; }
  void validate() const;
};

// Per-thread f32 scratch bound of one task's 16-bit gradient tile before rounding.
inline constexpr int64_t kCpuGluVjpMaxScratch = int64_t{1} << 24;

CpuGluVjpConfig cpu_glu_vjp_heuristics_config(const GluVjpProblem& p, const Device& device);
std::vector<CpuGluVjpConfig> cpu_glu_vjp_autotuning_configs(const GluVjpProblem& p,
                                                            const Device& device);

}  // namespace tokamax
