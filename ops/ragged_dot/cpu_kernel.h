// ragged_dot on CPU: the kernel launch over a work list (bodies in cpu_kernel.cc).
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   tm, tn, tk   tile extents of M, N, K (from the work list)
#pragma once

#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/cpu_tiling.h"
#include "ops/tensor.h"

namespace tokamax {

// Runs every task of `work` on up to `num_threads` threads of the CPU pool (0 = all cores).
// lhs and rhs share one dtype (f64, f32, bf16 or f16). Accumulates in f64 when the output is f64
// and in f32 otherwise; the output is rounded to nearest even once, at the end.
// Throws NotImplemented for dtype combinations it does not instantiate (mixed inputs, f64
// inputs with a narrower output).
void ragged_dot_cpu_kernel(const RaggedDotProblem& problem, const RaggedDotWorkList& work,
                           int num_threads,
                           // Inputs.
                           const HostTensor& lhs,  // [M, K], full array
                           const HostTensor& rhs,  // [G, K, N], full array
                           // Outputs.
                           HostTensor& out);  // [M, N] out_dtype, full array

}  // namespace tokamax
