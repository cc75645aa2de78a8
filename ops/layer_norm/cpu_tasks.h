// layer_norm on CPU: the per-target task bodies behind layer_norm_cpu_kernel (cpu_kernel.cc).
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//   w      inner elements of the current block (<= tI); w_pad = w rounded up to L
//   L      f32 lanes of the Highway target (16 on AVX-512, 8 on AVX2, 1 scalar)
#pragma once

#include <cstdint>

#include "ops/framework/dtype.h"

namespace tokamax {

// Rows [row_begin, row_end) of a last-axis problem (x, out: [rows, C] x_dtype), dispatched to
// this CPU's SIMD target. `row` is a per-thread f32 scratch of layer_norm_row_scratch_floats(C).
void layer_norm_last_axis_task(DType dtype, const void* x, void* out, int64_t row_begin,
                               int64_t row_end, int64_t C, const float* scale, const float* offset,
                               float eps, bool subtract_mean, bool stream, bool native_bf16,
                               float* row);
int64_t layer_norm_row_scratch_floats(int64_t C);

// One block of w inner elements at flat offset `offset_elements` ([o, 0, i0]) of an [O, C, I]
// problem. `stats` is a per-thread f32 scratch of 3 * w rounded up to L. The block the same
// thread does next, at `next_offset_elements` with `next_w` elements (next_w = 0: none), is
// prefetched while this one computes from cache.
void layer_norm_inner_axis_task(DType dtype, const void* x, void* out, int64_t offset_elements,
                                int64_t C, int64_t I, int64_t w, int64_t next_offset_elements,
                                int64_t next_w, const float* scale, const float* offset, float eps,
                                bool subtract_mean, bool stream, bool native_bf16, float* stats);

}  // namespace tokamax
