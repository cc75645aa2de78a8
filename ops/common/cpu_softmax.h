// Vectorized softmax pieces on CPU (Highway, dispatched at run time): the row reductions that
// dot_product_attention and linear_softmax_cross_entropy_loss stream their logits through.
// Scalar bookkeeping across blocks is OnlineSoftmax (ops/common/online_softmax.h).
#pragma once

#include <cstdint>

namespace tokamax {

// max(x[0..n)); -inf for n = 0 (and for a row of -inf).
float cpu_row_max(const float* x, int64_t n);
// x[i] = exp(scale * x[i] - shift) in place; returns the sum of the new values. Requires
// scale * x[i] <= shift (shift is the scaled row maximum or more) and scale > 0. Entries of -inf
// (masked) become exactly 0, as do those below shift - 86 (e^-86 < 5e-38); with shift = -inf
// every entry becomes 0 and the sum is 0.
float cpu_exp_shift_sum(float* x, int64_t n, float shift, float scale = 1.0f);
// x[i] *= a.
void cpu_scale_row(float* x, int64_t n, float a);
// x[i] = c * tanh(x[i] / c): the logit soft cap.
void cpu_soft_cap_row(float* x, int64_t n, float c);

// The Highway target these functions dispatch to on this CPU.
const char* cpu_softmax_target_name();

}  // namespace tokamax
