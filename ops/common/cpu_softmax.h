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
// sum x[i] y[i], in any order (vectorized): a row's rowsum(P dP) in the attention backward.
float cpu_dot_row(const float* x, const float* y, int64_t n);
// The softmax backward of one row, in place of dp: dp[i] = p[i] (dp[i] - delta), times gate[i]
// unless gate is null (the soft cap's derivative), with delta = rowsum(p dp) computed before.
void cpu_softmax_grad_row(const float* p, float* dp, int64_t n, float delta, const float* gate);

// Column-wise pieces for scores stored transposed, s [n, cols] with row stride ld: each column is
// one softmax row (a query), streamed over its entries (keys) in blocks of n rows.
//
// One online-softmax step over a block, per column m (run_max/run_sum/rescale have cols entries;
// run_max starts at -inf and run_sum at 0). run_max is the column's shift, which follows the
// maximum lazily: only when the block's maximum exceeds it by more than 8, so that most blocks
// need no rescaling (entries then reach e^8 at most):
//   mx        = scale * max_c s[c][m];  target = mx > run_max[m] + 8 ? mx : run_max[m]
//   s[c][m]   = exp(scale * s[c][m] - target)   (0 for -inf entries and columns)
//   rescale[m] = exp(run_max[m] - target)        (exactly 1 when the shift stays, and while the
//                                                 column has seen nothing)
//   run_sum[m] = run_sum[m] * rescale[m] + sum_c s[c][m];  run_max[m] = target.
// The caller multiplies its accumulators of column m by rescale[m]; sum / run_sum normalises.
// scale > 0.
void cpu_softmax_columns_step(float* s, int64_t n, int64_t cols, int64_t ld, float scale,
                              float* run_max, float* run_sum, float* rescale);
// x[r][m] *= factor[m] for r in [0, rows), m in [0, cols).
void cpu_scale_columns(float* x, int64_t rows, int64_t cols, int64_t ld, const float* factor);
// s[c][m] = -inf unless lo[m] <= first + c < hi[m]: entry c of the block is key first + c and
// column m sees keys [lo[m], hi[m]).
void cpu_mask_columns(float* s, int64_t n, int64_t cols, int64_t ld, int64_t first,
                      const int32_t* lo, const int32_t* hi);

}  // namespace tokamax
