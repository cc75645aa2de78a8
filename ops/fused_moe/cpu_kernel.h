// fused_moe on CPU: the fused layer over the GEMM engine.
//
// Dimensions.
//   T, H, E, I, k   as in base.h
//   R      routes, T k
//   m      routes of one task (<= tm), all of one expert
#pragma once

#include "ops/framework/tensor.h"
#include "ops/fused_moe/base.h"
#include "ops/fused_moe/cpu_config.h"
#include "ops/fused_moe/routing.h"

namespace tokamax {

// One task per run of up to tm routes of one expert (largest first, handed out dynamically):
// the task's token rows gathered from x into its own scratch, the gate/up product (for at most
// 16 routes the streaming kernel over L2-sized column blocks of the weights, else the GEMM
// engine's tiles), bias and act_fn applied to the f32 result, the down product from that
// scratch, bias and the route's weight applied as the rows are stored, rounded to x's dtype, to
// a buffer [R, H] in route order. Then one pass sums each token's k rows into out in f32. No
// dispatched copy of x and no [R, I] intermediate exist in memory. Quantized experts (i8,
// f8e4m3) run on the f32 engine: the streaming kernel decodes and scales their codes as it reads
// them (a byte per weight from memory); the engine's tiles dequantize them as they pack their
// panels.
void fused_moe_cpu_kernel(const FusedMoeProblem& problem, const CpuFusedMoeConfig& config,
                          const MoeRouting& routing,
                          // Inputs.
                          const Tensor& x,         // [T, H]
                          const Tensor& w1,        // [E, H, 2 I]
                          const Tensor& w2,        // [E, I, H]
                          const Tensor* w1_bias,   // [E, 1, 2 I] or null
                          const Tensor* w2_bias,   // [E, 1, H] or null
                          const Tensor* w1_scale,  // quantized experts: [E, blocks, 2 I], or null
                          const Tensor* w2_scale,  // [E, blocks, H], or null
                          // Outputs.
                          Tensor& out);  // [T, H]

}  // namespace tokamax
