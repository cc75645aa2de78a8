// ragged_dot_vjp on CPU: the kernel (both gradient products on the shared GEMM engine).
//
// Dimensions: as vjp_cpu_config.h.
#pragma once

#include "ops/framework/tensor.h"
#include "ops/ragged_dot/vjp_base.h"
#include "ops/ragged_dot/vjp_cpu_config.h"

namespace tokamax {

// dlhs = dout rhs[g]^T per group and drhs[g] = lhs_g^T dout_g, threaded over tiles of both;
// rows without a forward output get dlhs = 0, empty groups drhs[g] = 0. `c` is validated and
// checked against the problem.
void ragged_dot_vjp_cpu_kernel(const RaggedDotVjpProblem& p, const CpuRaggedDotVjpConfig& c,
                               const Tensor& lhs, const Tensor& rhs, const Tensor& dout,
                               Tensor& dlhs, Tensor& drhs);

}  // namespace tokamax
