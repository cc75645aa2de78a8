// ragged_dot on CPU: maybe_quantize_lhs's operands, once per call, on the pool: the int8 path's
// codes (cpu_int8_kernel.h) or the f32 path's dequantized values.
//
// Dimensions.
//   M, K   lhs [M, K]; only the owned rows [first_row(), rows()) are quantized
//   Kq     K rounded up to a multiple of 4 (the int8 path's quads)
#pragma once

#include <cstdint>

#include "ops/framework/tensor.h"
#include "ops/ragged_dot/base.h"

namespace tokamax {

// codes [owned_rows() (+ padding), Kq] row-major: row i holds u8 = q + 128 of owned row
// first_row() + i (quantize_row_int8's codes) in columns [0, K); the rest of the buffer is left
// as it is. scales [owned_rows(), scale_blocks]: their block scales.
void quantize_lhs_codes(const RaggedDotProblem& p, const Tensor& lhs, int num_threads, int64_t Kq,
                        uint8_t* codes, float* scales);

// codes [M, K] row-major: q of each owned row (quantize_row_int8), scales [M, scale_blocks].
void quantize_lhs_int8(const RaggedDotProblem& p, const Tensor& lhs, int num_threads, int8_t* codes,
                       float* scales);

// values [M, K] row-major: s * q of each owned row quantized to rhs's type
// (quantize_row_values).
void quantize_lhs_values(const RaggedDotProblem& p, const Tensor& lhs, int num_threads,
                         float* values);

}  // namespace tokamax
