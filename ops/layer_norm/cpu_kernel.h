// layer_norm on CPU: the kernel launch (Highway task bodies in cpu_kernel.cc).
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//   tI     inner_block: inner elements of one block when I > 1
//   L      f32 lanes of the SIMD target (16 on AVX-512, 8 on AVX2)
#pragma once

#include <cstdint>

#include "ops/layer_norm/base.h"

namespace tokamax {

// How the kernel splits the work. A unit is one row (last axis) or one (o, inner block of tI
// elements) pair (other axes); a task is `units_per_task` consecutive units.
struct CpuLayerNormLaunch {
  int64_t units_per_task = 1;
  int64_t inner_block = 256;  // tI; ignored for the last axis
  int num_threads = 0;        // 0 = every core of the pool
  // Non-temporal stores of out where the layout keeps whole vectors aligned (C, or I and tI,
  // multiples of L); elsewhere ordinary stores.
  bool stream_stores = false;
  // bf16 outputs rounded by vcvtneps2bf16 where the CPU has avx512_bf16 (and the kernel runs its
  // AVX-512 target); elsewhere by the exact integer rounding of float_to_bf16.
  bool native_bf16 = true;
};

// Normalizes x (f32, bf16 or f16; statistics in f32) into out, on up to num_threads threads of
// the CPU pool. Each unit reads its x once from memory and does the second statistics pass and
// the output pass from L1/L2. Throws NotImplemented for other dtypes.
void layer_norm_cpu_kernel(const LayerNormProblem& problem, const CpuLayerNormLaunch& launch,
                           // Inputs.
                           const void* x,        // [O, C, I] x_dtype, full array
                           const float* scale,   // [C] f32 (ones when absent)
                           const float* offset,  // [C] f32 (zeros when absent)
                           // Outputs.
                           void* out);  // [O, C, I] x_dtype, full array

// Whether native_bf16 takes effect here: an AVX-512 target on a CPU with avx512_bf16.
bool layer_norm_cpu_has_native_bf16();

}  // namespace tokamax
