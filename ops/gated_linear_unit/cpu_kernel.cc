// gated_linear_unit on CPU: the fused task loop over (row tile, column tile).
//
// Dimensions.
//   M      rows of x, *B flattened
//   K      contraction extent
//   N      output features
//   tm     rows of one task; rows = the task's actual rows (<= tm at the end of M)
//   tn     gate columns of one task (all of N when tile_n = 0); cols = the task's actual columns
//
// The fused weights [K, 2, N] are read as one row-major matrix W[K, 2N] (row stride 2N): gate
// column n is W column n and projection column n is W column N + n. A task that covers all of N
// therefore multiplies its x rows by all of W in one GEMM of width 2N (x packed once); a task over
// columns [n0, n0 + cols), or any task with unfused weights (Wg, Wp [K, N]: GluWeights), runs two
// GEMMs, on Wg columns n0.. and Wp columns n0... Either way the f32 results land
// in the thread's scratch [tm, 2 tn] (gate left, projection right), are combined in place by
// cpu_glu_row while still in L2, and are stored (rounded once, to x's dtype) to the output. The
// task loop and its products, with each shared operand packed once, are glu_products
// (cpu_products_kernel.h), which the backward's first phase runs too.
#include "ops/gated_linear_unit/cpu_kernel.h"

#include <string>

#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_activation.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/errors.h"
#include "ops/gated_linear_unit/cpu_products_kernel.h"

namespace tokamax {
namespace {

// Per-thread scratch that only grows: a bench or a model calls the op back to back, and the pool
// keeps its threads, so the buffer is allocated once per thread and shape class.
float* scratch_floats(size_t count) {
  thread_local cpu::ScratchBuffer buffer;
  return buffer.floats(count);
}

}  // namespace

void gated_linear_unit_cpu_kernel(const GluProblem& p, const CpuGluConfig& c, const Tensor& x,
                                  const GluWeights& weights, Tensor& out, int64_t wave_bytes) {
  if (p.x_dtype == DType::kF64 || p.w_dtype == DType::kF64) {
    throw NotImplemented(
        "cpu gated_linear_unit: f64 operands; the kernel accumulates in f32, which would drop "
        "their precision");
  }
  const int64_t M = p.M, N = p.N;
  if (M == 0 || N == 0) return;
  const int lanes = cpu::simd_f32_lanes();
  if (c.nr % lanes != 0) {
    throw NotImplemented("cpu gated_linear_unit: nr=" + std::to_string(c.nr) +
                         " is not a multiple of the " + std::to_string(lanes) +
                         " f32 lanes of this CPU's SIMD target");
  }
  CpuGemmOptions gemm;
  gemm.mr = c.mr;
  gemm.nr_vectors = c.nr / lanes;
  gemm.tk = c.tile_k;
  gemm.tn = c.panel_n;
  gemm.engine = gemm_engine(c.bf16_path);

  // One GEMM of width 2N needs [Wg | Wp] side by side in each row: the fused layout.
  const bool whole_n = c.tile_n == 0 && p.fused_weights;
  const int64_t tm = c.tile_m, tn = task_columns(p, c);
  const int64_t ld_scratch = 2 * tn;  // gate [tm, tn] | projection [tm, tn]
  const size_t out_size = dtype_size(p.out_dtype());
  char* out_data = static_cast<char*>(out.raw());
  const Activation activation = p.activation;
  const bool f32_out = p.out_dtype() == DType::kF32;

  GluProductTiles tiles;
  tiles.tm = tm;
  tiles.tn = tn;
  tiles.whole_n = whole_n;
  tiles.gemm = gemm;
  tiles.num_threads = c.num_threads;
  // Each task's products land in the thread's scratch [tm, 2 tn]: gate left, projection right.
  auto scratch_of = [&] { return scratch_floats(static_cast<size_t>(tm * ld_scratch)); };
  auto dst = [&](const GluTask&, int part) { return scratch_of() + part * tn; };
  auto epilogue = [&](const GluTask& t) {
    const int64_t m0 = t.m0, rows = t.rows, n0 = t.n0, cols = t.cols;
    float* scratch = scratch_of();
    // act(gate) * proj, straight into an f32 output; for 16-bit outputs in place over the gate
    // tile, then one rounding per element on the store.
    if (f32_out) {
      float* out_rows = reinterpret_cast<float*>(out_data) + m0 * N + n0;
      for (int64_t r = 0; r < rows; ++r) {
        const float* gate = scratch + r * ld_scratch;
        cpu_glu_row(activation, gate, gate + tn, out_rows + r * N, cols);
      }
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        float* gate = scratch + r * ld_scratch;
        cpu_glu_row(activation, gate, gate + tn, gate, cols);
      }
      store_rows(scratch, ld_scratch, rows, cols, p.out_dtype(),
                 out_data + (m0 * N + n0) * static_cast<int64_t>(out_size), N);
    }
  };
  glu_products(p, tiles, x, weights, ld_scratch, dst, epilogue, wave_bytes);
}

}  // namespace tokamax
