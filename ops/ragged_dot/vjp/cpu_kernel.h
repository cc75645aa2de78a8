// ragged_dot_vjp on CPU: the kernel (both gradient products on the shared GEMM engine).
//
// Dimensions: as cpu_config.h.
#pragma once

#include "ops/framework/tensor.h"
#include "ops/ragged_dot/vjp/base.h"
#include "ops/ragged_dot/vjp/cpu_config.h"

namespace tokamax {

// dlhs = dout rhs[g]^T per group and drhs[g] = lhs_g^T dout_g, threaded over tiles of both;
// rows without a forward output get dlhs = 0, empty groups drhs[g] = 0. `c` is validated and
// checked against the problem.
// The packed B slabs of one wave stay under this (one slab at least).
inline constexpr int64_t kRaggedDotVjpWaveBytes = int64_t{64} << 20;

void ragged_dot_vjp_cpu_kernel(const RaggedDotVjpProblem& p, const CpuRaggedDotVjpConfig& c,
                               // Inputs.
                               const Tensor& lhs,   // [M, K], full array
                               const Tensor& rhs,   // [G, K, N], full array
                               const Tensor& dout,  // [M, N] out_dtype, full array
                               // Outputs.
                               Tensor& dlhs,  // [M, K] lhs's dtype
                               Tensor& drhs,  // [G, K, N] rhs's dtype
                               int64_t wave_bytes = kRaggedDotVjpWaveBytes);

}  // namespace tokamax
