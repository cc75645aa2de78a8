// gated_linear_unit on CPU: the products x W of the forward kernel (cpu_kernel.cc) and of the
// backward's first phase (vjp/cpu_kernel.cc), as tasks (row tile, column tile) on the pool, each
// operand that several tasks share packed once.
//
// Dimensions.
//   M, K, N  x [M, K]; Wg, Wp [K, N] (GluWeights: fused [K, 2N] or two matrices)
//   tm, tn   rows and gate (= projection) columns of one task
#pragma once

#include <cstdint>
#include <functional>

#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/tiles.h"
#include "ops/framework/tensor.h"
#include "ops/gated_linear_unit/base.h"

namespace tokamax {

struct GluProductTiles {
  int64_t tm = 0;
  int64_t tn = 0;
  // One product of width 2N per task (fused weights and tn >= N): W [K, 2N] in one GEMM.
  bool whole_n = false;
  CpuGemmOptions gemm;
  int num_threads = 0;  // 0 = all cores
};

// One task: rows [m0, m0 + rows) of x, gate and projection columns [n0, n0 + cols).
struct GluTask {
  int64_t m0, rows, n0, cols;
};

// Runs every task: its products, then epilogue(task). Part 0 of a task is the gate columns
// (whole_n: all 2N columns, gate then projection), part 1 the projection columns; each is
// written in f32 to dst(task, part), row stride ld (overwritten). epilogue and dst run on the
// task's thread. A row tile's x rows shared by several column tasks and a column tile's weights
// shared by several row tasks are each packed once (cpu_gemm_tiles); `wave_bytes` bounds the
// packed operands held at once (tests lower it).
void glu_products(const GluProblem& p, const GluProductTiles& tiles,
                  // Inputs.
                  const Tensor& x,            // [M, K], full array
                  const GluWeights& weights,  // Wg, Wp [K, N] (row stride ld), full arrays
                  // Outputs.
                  int64_t ld,  // row stride of every dst tile
                  const std::function<float*(const GluTask&, int part)>& dst,  // [rows, width]
                  const std::function<void(const GluTask&)>& epilogue,
                  int64_t wave_bytes = kGemmTilesWaveBytes);

}  // namespace tokamax
