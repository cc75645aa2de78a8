// triangle_multiplication_vjp on CPU: the forward's first two phases again, then three gradient
// phases over the GEMM engine.
//
// Dimensions.
//   N, C, H, D, P, W   as base.h
//   tm     positions (phases 3 and 5) or rows of i (phase 2) per task
//   S      weight slots: fixed runs of consecutive position tasks, each summing its own partial
//          weight gradients (a fixed count, so the sums' order never depends on the threads)
#pragma once

#include "ops/framework/tensor.h"
#include "ops/triangle_multiplication/cpu_config.h"
#include "ops/triangle_multiplication/vjp/base.h"

namespace tokamax {

// Phases 1 and 2 as the forward's kernel (cpu_kernel.h of the forward: the planes v in x's
// dtype, sigmoid(q) [P, D], act [H][P]). Phase 3, per tile of tm positions: act's rows, the
// output norm, o = b projection_out, then do and dq (dq over the gates), db = do
// projection_out^T, projection_out's gradient b^T do and the output norm's into the slot's
// partial sums, and dact over act. Phase 4, per channel h: dL_h and dR_h (two N x N x N
// products, base.h) over that channel's planes. Phase 5, per tile of positions: the input norm
// and [g | pr] = a [gate_in | projection_in] again, Z = [dg | dpr | dq], da = Z W_in^T (one
// product), the input weights' gradient a^T Z and the input norm's into the slot's sums, dx in
// x's dtype. Then the slots added in order and each weight gradient rounded once. Memory: the
// forward kernel's buffers (the planes, the gates and act, reused for dv, dq and dact) and
// the slots' partial gradients.
void triangle_multiplication_vjp_cpu_kernel(const TriangleVjpProblem& p, const CpuTriangleConfig& c,
                                            const TensorMap& inputs,  // the forward's and dout
                                            // Outputs.
                                            TensorMap& outputs);  // dx and d<weight> for each

}  // namespace tokamax
