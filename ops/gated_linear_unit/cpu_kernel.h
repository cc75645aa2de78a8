// gated_linear_unit on CPU: the fused kernel (both products, the activation and the product in
// one pass over x).
//
// Dimensions.
//   M      rows of x, *B flattened
//   K      contraction extent
//   N      output features
//   tm, tn, tk, pn, mr, nr   see cpu_config.h
#pragma once

#include <cstdint>

#include "ops/framework/tensor.h"
#include "ops/gated_linear_unit/base.h"
#include "ops/gated_linear_unit/cpu_config.h"
#include "ops/gated_linear_unit/cpu_products_kernel.h"

namespace tokamax {

// Runs the clamped config `c` (clamp_to_problem) over tasks (row tile, column tile) on the
// process thread pool. Throws NotImplemented for f64 operands (the kernel accumulates in f32
// only), a micro-tile this CPU lacks, or native_dot where it cannot run. `wave_bytes` bounds the
// packed operands held at once (tests lower it to force one tile per wave).
void gated_linear_unit_cpu_kernel(const GluProblem& problem, const CpuGluConfig& c,
                                  // Inputs.
                                  const Tensor& x,            // [M, K] (*B flattened)
                                  const GluWeights& weights,  // Wg, Wp [K, N] (row stride ld)
                                  // Outputs.
                                  Tensor& out,  // [M, N] x's dtype
                                  int64_t wave_bytes = kGemmTilesWaveBytes);

}  // namespace tokamax
