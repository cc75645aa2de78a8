// ragged_dot on CPU: the kernel launch over a work list (task loop in cpu_kernel.cc).
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   tm, tn, tk, task_n   tile extents (from the work list, see cpu_tiling.h)
//   mr, nr               the register-blocked micro-tile; nr = nr_vectors * lanes
#pragma once

#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/framework/tensor.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/cpu_tiling.h"

namespace tokamax {

// How the kernel runs a work list. The tile extents come from the work list itself.
struct CpuKernelOptions {
  int mr = 14;           // micro-tile rows: a shape of micro_kernel_shapes(cpu::simd_f32_lanes())
  int nr_vectors = 2;    // micro-tile columns, in vectors
  bool pack_rhs = true;  // false: read full rhs strips in place (no panel copy), for few rows
  // bf16 inputs: f32 FMAs after widening, vdpbf16ps on pair-packed operands, or AMX tiles.
  GemmEngine engine = GemmEngine::kF32Fma;
  bool int8_tiles = false;  // with int8: TDPBUSD on AMX tiles (32 x 32 blocks) for vpdpbusd
  bool int8 = false;        // maybe_quantize_lhs x i8 rhs on vpdpbusd (cpu_int8_kernel.h);
                            // nr_vectors then counts 16 int32 lanes
  int num_threads = 0;      // 0 = every core of the pool
};

// Runs every task of `work` (built over the output's out_N columns) on up to `num_threads`
// threads of the CPU pool, with the problem's epilogue (bias, activation, act(gate) * up) applied
// to each task's partial sums before they are stored: no second pass over the output. Accumulates
// in f64 when the output is f64 (then mr x nr is the first shape of the table, in f64 lanes) and in
// f32 otherwise; the output is rounded to nearest even once, at the end. Throws NotImplemented for
// what it does not instantiate (f64 inputs with a narrower output, a micro-tile shape this CPU's
// SIMD target lacks, a bf16 engine this CPU lacks or with non-bf16 inputs).
void ragged_dot_cpu_kernel(const RaggedDotProblem& problem, const RaggedDotWorkList& work,
                           const CpuKernelOptions& options,
                           // Inputs.
                           const Tensor& lhs,  // [M, K], full array
                           const Tensor& rhs,  // [G, K, N], full array
                           // Outputs.
                           Tensor& out,  // [M, out_N] out_dtype, full array
                           // Inputs: rhs_bias [G, N] and rhs_scale [G, (K / b,) N] when the
                           // problem has them.
                           const Tensor* bias = nullptr, const Tensor* scale = nullptr);

}  // namespace tokamax
