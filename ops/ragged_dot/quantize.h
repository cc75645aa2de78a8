// ragged_dot: maybe_quantize_lhs's dynamic quantization of one lhs row to the weights' type
// (int8, or fp8 e4m3 as upstream's gmm_v2 does for fp8 weights), shared by every implementation
// that runs it and by the reference (the same f32 arithmetic, so the same codes).
//
// Dimensions.
//   K      the row's extent
//   b      the K block that shares a scale (rhs_scale's block, K for a per-channel scale)
#pragma once

#include <cstdint>

#include "ops/framework/dtype.h"

namespace tokamax {

// For each K block j of `x` [K]: s_j = max |x| over the block / 127 (f32), and
// q[k] = round_half_even(x[k] * (1 / s_j)) in [-127, 127] (0 for an all-zero block, whose s_j is
// 0), so that |x[k] - s_j q[k]| <= s_j / 2 up to the f32 rounding of 1 / s_j and the product.
// scales gets K / b values.
void quantize_row_int8(const float* x, int64_t K, int64_t b, int8_t* q, float* scales);

// Relative slack of |x - s q| <= (1/2 + kQuantizeSlack) s: the f32 roundings of 1 / s and x / s
// (a few units of 2^-24 of |x / s| <= 127.5).
inline constexpr double kQuantizeSlack = 1.0 / (1 << 14);

// One row quantized to `qtype` (i8: quantize_row_int8; f8e4m3: s_j = max |x| / 448 and
// q[k] = e4m3(x[k] * (1 / s_j)), round to nearest even), as the values its products are taken
// of: out[k] = s_j * q[k] (exact in f32). scales gets K / b values.
void quantize_row_values(DType qtype, const float* x, int64_t K, int64_t b, float* out,
                         float* scales);

// A bound on |x - s q| for one element quantized to `qtype` with block scale s: (1/2 + slack) s
// for i8; for e4m3, half its relative spacing 2^-4 of |x| in the normal range and half its
// subnormal spacing 2^-10 of s below it, with the same slack.
double quantization_error(DType qtype, double x, double s);

}  // namespace tokamax
