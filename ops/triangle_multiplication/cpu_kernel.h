// triangle_multiplication on CPU: the three phases over the GEMM engine (the first two, and the
// buffers they fill, also run for triangle_multiplication_vjp's kernel).
//
// Dimensions.
//   N, C, H, D, P   as in base.h
//   tm     positions (phases 1 and 3) or rows of i (phase 2) per task
#pragma once

#include <memory>

#include "ops/common/cpu_gemm/gemm.h"
#include "ops/framework/tensor.h"
#include "ops/triangle_multiplication/base.h"
#include "ops/triangle_multiplication/cpu_config.h"
#include "ops/triangle_multiplication/rows.h"

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

// The working buffers of phases 1 and 2 (the VJP's kernel runs them too, then its own phases).
struct TriangleCpuBuffers {
  DType plane_dtype = DType::kF32;                                  // x's dtype
  std::unique_ptr<char, void (*)(void*)> planes{nullptr, nullptr};  // [2][H][P]: left, right
  std::unique_ptr<float, void (*)(void*)> gates{nullptr, nullptr};  // [P, D] sigmoid(a gate_out)
  std::unique_ptr<float, void (*)(void*)> act{nullptr, nullptr};    // [H][P]
  char* plane(const TriangleMultiplicationProblem& p, int64_t t) const;  // channel t of 2H
};
TriangleCpuBuffers triangle_cpu_buffers(const TriangleMultiplicationProblem& p);

// The engine options of a config (the f32 engine on its micro-tile and blocking).
CpuGemmOptions triangle_gemm_options(const CpuTriangleConfig& c);

// Phase 1 into buffers.planes and buffers.gates; `w_in_packed` is w.w_in packed as the
// right-hand side for triangle_gemm_options(c).
void triangle_cpu_project(const TriangleMultiplicationProblem& p, const CpuTriangleConfig& c,
                          const TensorMap& inputs, const TriangleWeightsF32& w,
                          const PackedGemmOperand& w_in_packed, TriangleCpuBuffers& buffers);
// Phase 2: buffers.act from buffers.planes.
void triangle_cpu_product(const TriangleMultiplicationProblem& p, const CpuTriangleConfig& c,
                          TriangleCpuBuffers& buffers);

// x's rows [q0, q0 + rows) widened to f32 into xw [rows, C].
void triangle_widen_x(const TriangleMultiplicationProblem& p, const Tensor& x, int64_t q0,
                      int64_t rows, float* xw);

}  // namespace tokamax
