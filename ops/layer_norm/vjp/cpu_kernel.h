// layer_norm_vjp on CPU: the kernel launch (Highway task bodies in cpu_kernel_last.cc and
// cpu_kernel_inner.cc).
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//   tI     inner_block: inner elements of one block when I > 1
//   L      f32 lanes of the SIMD target (16 on AVX-512, 8 on AVX2)
#pragma once

#include <cstdint>

#include "ops/layer_norm/vjp/base.h"

namespace tokamax {

// How the kernel splits the work. A unit is one row (last axis) or one (o, inner block of tI
// elements) pair (other axes); a task is `units_per_task` consecutive units.
struct CpuLayerNormVjpLaunch {
  int64_t units_per_task = 1;
  int64_t inner_block = 256;  // tI; ignored for the last axis
  int num_threads = 0;        // 0 = every core of the pool
  // Non-temporal stores of dx where the layout keeps whole vectors aligned (C, or I and tI,
  // multiples of L); elsewhere ordinary stores.
  bool stream_stores = false;
  // bf16 dx rounded by vcvtneps2bf16 where the CPU has avx512_bf16 (and the kernel runs its
  // AVX-512 target); elsewhere by the exact integer rounding of float_to_bf16.
  bool native_bf16 = true;
};

// dx, and the f32 sums dscale / doffset (each over every row: per-thread partial sums added in
// thread order), of x (f32, bf16 or f16; arithmetic in f32) on up to num_threads threads of the
// CPU pool. Each unit reads its x and dout from memory once; the passes that need the unit's
// reductions re-read them from cache. Throws NotImplemented for other dtypes.
void layer_norm_vjp_cpu_kernel(const LayerNormVjpProblem& problem,
                               const CpuLayerNormVjpLaunch& launch,
                               // Inputs.
                               const void* x,       // [O, C, I] x_dtype, full array
                               const float* scale,  // [C_pad] f32: scale + scale_offset (ones
                                                    // when absent), zero-padded to a multiple of L
                               const void* dout,    // [O, C, I] x_dtype, full array
                               // Outputs.
                               void* dx,         // [O, C, I] x_dtype, full array
                               float* dscale,    // [C] f32
                               float* doffset);  // [C] f32

}  // namespace tokamax
