// gated_linear_unit_vjp on CPU: the kernel (recompute, H, and the gradient products on the
// shared GEMM engine).
//
// Dimensions: as vjp_cpu_config.h.
#pragma once

#include "ops/common/activation.h"
#include "ops/framework/tensor.h"
#include "ops/gated_linear_unit/vjp_base.h"
#include "ops/gated_linear_unit/vjp_cpu_config.h"

namespace tokamax {

// n elements of one row of H in place over the recomputed gate and projection values (f32),
// with the matching dout (f32, bf16 or f16): gate <- dg = dout p act'(g), proj <- dp =
// dout act(g), in f32 as the forward evaluates act. Shared with the oneDNN composite, which
// differs only in its products.
void glu_vjp_h_row(Activation activation, DType dout_dtype, const void* dout, int64_t n,
                   float* gate, float* proj);

void gated_linear_unit_vjp_cpu_kernel(const GluVjpProblem& p, const CpuGluVjpConfig& c,
                                      const Tensor& x, const GluWeights& weights,
                                      const Tensor& dout, Tensor& dx,
                                      const GluWeightGrads& dweights);

}  // namespace tokamax
