// gated_linear_unit_vjp on CPU: the kernel (recompute, H, and the gradient products on the
// shared GEMM engine).
//
// Dimensions: as cpu_config.h.
#pragma once

#include "ops/common/activation.h"
#include "ops/framework/tensor.h"
#include "ops/gated_linear_unit/vjp/base.h"
#include "ops/gated_linear_unit/vjp/cpu_config.h"

namespace tokamax {

// n elements of one row of H in place over the recomputed gate and projection values (f32),
// with the matching dout (f32, bf16 or f16): gate <- dg = dout p act'(g), proj <- dp =
// dout act(g), in f32 as the forward evaluates act. Shared with the oneDNN composite, which
// differs only in its products.
void glu_vjp_h_row(Activation activation, DType dout_dtype,
                   // Inputs.
                   const void* dout,  // [n] of one row
                   int64_t n,
                   // Inputs and outputs (in place).
                   float* gate,   // [n] g in, dg out
                   float* proj);  // [n] p in, dp out

// dx and the weight gradients (three phases, cpu_kernel.cc); H [M, 2N] f32 lives in a
// scratch buffer of the calling thread that only grows.
void gated_linear_unit_vjp_cpu_kernel(const GluVjpProblem& p, const CpuGluVjpConfig& c,
                                      // Inputs.
                                      const Tensor& x,            // [M, K] (*B flattened)
                                      const GluWeights& weights,  // Wg, Wp [K, N] views
                                      const Tensor& dout,         // [M, N] x's dtype
                                      // Outputs.
                                      Tensor& dx,                       // [M, K] x's dtype
                                      const GluWeightGrads& dweights);  // dWg, dWp [K, N] views

}  // namespace tokamax
