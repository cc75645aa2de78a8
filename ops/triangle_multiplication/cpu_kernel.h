// triangle_multiplication on CPU: the three phases over the GEMM engine.
//
// Dimensions.
//   N, C, H, D, P   as in base.h
//   tm     positions (phases 1 and 3) or rows of i (phase 2) per task
#pragma once

#include "ops/framework/tensor.h"
#include "ops/triangle_multiplication/base.h"
#include "ops/triangle_multiplication/cpu_config.h"

namespace tokamax {

// Phase 1, per tile of tm positions: the input norm, one product with the weights [gate_in |
// projection_in | gate_out] packed once per call ([C, 4H + D]), then sigmoid(gate) * projection
// under the mask into the left and right planes [H][P] (transposed in cache) and sigmoid(gate
// out) [P, D]. Phase 2, per channel h and tile of tm rows i: the triangle product of the two
// planes on the GEMM engine (outgoing: L_h R_h^T; incoming: R_h^T L_h), reading the transposed
// operand in its packing, into act [H][P]. Phase 3, per tile of positions: act gathered to rows
// [tm, H], the output norm, one product with projection_out (packed once), times the gate, the
// single rounding to x's dtype. Intermediates are f32 but the planes, which are in x's dtype for
// 16-bit inputs (rounded once, as the error model allows).
void triangle_multiplication_cpu_kernel(const TriangleMultiplicationProblem& p,
                                        const CpuTriangleConfig& c,
                                        const TensorMap& inputs,  // x, mask and the weights
                                        // Outputs.
                                        Tensor& out);  // [N, N, D]

}  // namespace tokamax
