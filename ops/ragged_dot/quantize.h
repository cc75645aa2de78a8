// ragged_dot: maybe_quantize_lhs's dynamic int8 quantization of one lhs row, shared by every
// implementation that runs it and by the reference (the same f32 arithmetic, so the same codes).
//
// Dimensions.
//   K      the row's extent
//   b      the K block that shares a scale (rhs_scale's block, K for a per-channel scale)
#pragma once

#include <cstdint>

namespace tokamax {

// For each K block j of `x` [K]: s_j = max |x| over the block / 127 (f32), and
// q[k] = round_half_even(x[k] * (1 / s_j)) in [-127, 127] (0 for an all-zero block, whose s_j is
// 0), so that |x[k] - s_j q[k]| <= s_j / 2 up to the f32 rounding of 1 / s_j and the product.
// scales gets K / b values.
void quantize_row_int8(const float* x, int64_t K, int64_t b, int8_t* q, float* scales);

// Relative slack of |x - s q| <= (1/2 + kQuantizeSlack) s: the f32 roundings of 1 / s and x / s
// (a few units of 2^-24 of |x / s| <= 127.5).
inline constexpr double kQuantizeSlack = 1.0 / (1 << 14);

}  // namespace tokamax
