// layer_norm_vjp on CPU: the per-target task bodies behind layer_norm_vjp_cpu_kernel.
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

// What every task of one launch shares.
struct LayerNormVjpTaskArgs {
  DType dtype = DType::kF32;
  // Inputs.
  const void* x = nullptr;       // [O, C, I] dtype, full array
  const void* dout = nullptr;    // [O, C, I] dtype, full array
  const float* scale = nullptr;  // [C_pad] f32: scale + scale_offset, ones when absent, padded
                                 // with zeros to a multiple of L
  // Outputs.
  void* dx = nullptr;  // [O, C, I] dtype, full array
  int64_t C = 1, I = 1;
  float eps = 0.0f;
  bool subtract_mean = true;
  bool stream = false;  // non-temporal stores of dx (the launch checks the alignment)
  // bf16 dx rounded by vcvtneps2bf16 (the launch checks that the CPU has it).
  bool native_bf16 = false;
};

// Rows [row_begin, row_end) of a last-axis problem, dispatched to this CPU's SIMD target.
// dscale and doffset partial sums of these rows are added to `dscale_acc` / `doffset_acc`
// ([C_pad] f32 each, per thread). `scratch`: a per-thread f32 scratch of 3 * C (bf16 rows in
// pairs of vectors keep the scale and their partial sums there in pair order).
void layer_norm_vjp_last_axis_task(const LayerNormVjpTaskArgs& args, int64_t row_begin,
                                   int64_t row_end, float* scratch, float* dscale_acc,
                                   float* doffset_acc);

// One block of w inner elements at flat offset `offset_elements` ([o, 0, i0]) of an [O, C, I]
// problem; the block the same thread does next (next_w = 0: none) is prefetched during the
// output pass. `stats` is a per-thread f32 scratch of 4 * w_pad.
void layer_norm_vjp_inner_axis_task(const LayerNormVjpTaskArgs& args, int64_t offset_elements,
                                    int64_t w, int64_t next_offset_elements, int64_t next_w,
                                    float* stats, float* dscale_acc, float* doffset_acc);

}  // namespace tokamax
