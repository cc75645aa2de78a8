// gated_linear_unit on CPU: the fused task loop over (row tile, column tile).
//
// Dimensions.
//   M      rows of x, *B flattened
//   K      contraction extent
//   N      output features
//   tm     rows of one task; rows = the task's actual rows (<= tm at the end of M)
//   tn     gate columns of one task (all of N when tile_n = 0); cols = the task's actual columns
//   nm, nn task counts along M and N
//
// The fused weights [K, 2, N] are read as one row-major matrix W[K, 2N] (row stride 2N): gate
// column n is W column n and projection column n is W column N + n. A task that covers all of N
// therefore multiplies its x rows by all of W in one GEMM of width 2N (x packed once); a task over
// columns [n0, n0 + cols), or any task with unfused weights (Wg, Wp [K, N]: GluWeights), runs two
// GEMMs, on Wg columns n0.. and Wp columns n0... Either way the f32 results land
// in the thread's scratch [tm, 2 tn] (gate left, projection right), are combined in place by
// cpu_glu_row while still in L2, and are stored (rounded once, to x's dtype) to the output.
// Operands that several tasks share are packed once, before those tasks: the x rows of a row
// tile when N has several column tiles (a token batch as one row tile with N in 8 tasks packed
// x 8 times: 5% of a llama-MLP call on Zen 3), the weight columns of a column tile when M has
// several row tiles (each row tile re-packed all of W). x in waves of row tiles, W in waves of
// column tiles within them, each under half of wave_bytes of packed operands.
#include "ops/gated_linear_unit/cpu_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_activation.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/errors.h"

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
  const int64_t M = p.M, K = p.K, N = p.N;
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
  gemm.native_bf16 = c.bf16_path == "native_dot";

  // One GEMM of width 2N needs [Wg | Wp] side by side in each row: the fused layout.
  const bool whole_n = c.tile_n == 0 && p.fused_weights;
  const int64_t tm = c.tile_m, tn = task_columns(p, c);
  const int64_t nm = ceil_div(M, tm), nn = ceil_div(N, tn);
  const int64_t ld_scratch = 2 * tn;  // gate [tm, tn] | projection [tm, tn]
  const size_t x_size = dtype_size(p.x_dtype), w_size = dtype_size(p.w_dtype);
  const char* x_data = static_cast<const char*>(x.raw());
  const char* gate_data = static_cast<const char*>(weights.gate);
  const char* proj_data = static_cast<const char*>(weights.proj);
  char* out_data = static_cast<char*>(out.raw());
  const Activation activation = p.activation;
  const bool f32_out = p.x_dtype == DType::kF32;

  auto x_rows = [&](int64_t m0) {
    return GemmOperand{p.x_dtype, x_data + m0 * K * static_cast<int64_t>(x_size), K, false};
  };
  // The B operands of column tile n_i: all of W [K, 2N] (whole_n), or the gate then the
  // projection columns [n0, n0 + cols).
  auto w_columns = [&](int64_t n_i, int part) {
    const char* base = whole_n ? gate_data : (part == 0 ? gate_data : proj_data);
    return GemmOperand{p.w_dtype, base + n_i * tn * static_cast<int64_t>(w_size), weights.ld,
                       false};
  };
  const int64_t parts = whole_n ? 1 : 2;
  auto w_cols = [&](int64_t n_i) { return whole_n ? 2 * N : std::min(tn, N - n_i * tn); };
  // Operands shared by several tasks are packed once, ahead of them: a row tile's x rows when N
  // has several column tiles, a column tile's weights when M has several row tiles. In the
  // buffers of the calling thread, kept between calls (a fresh allocation per call would be
  // zeroed page by page); x row tiles in waves of at most half of wave_bytes, weight column
  // tiles likewise within each x wave (one tile per wave at the least).
  const bool share_x = nn > 1 && K > 0, share_w = nm > 1 && K > 0;
  const int64_t half_budget = std::max<int64_t>(wave_bytes / 2, 1);
  const int64_t x_tile_bytes = round_up(tm, c.mr) * round_up(K, c.tile_k) * 4;
  const int64_t w_tile_bytes = parts * round_up(w_cols(0), c.nr) * round_up(K, c.tile_k) * 4;
  const int64_t x_wave =
      share_x ? std::clamp<int64_t>(half_budget / std::max<int64_t>(x_tile_bytes, 1), 1, nm) : nm;
  const int64_t w_wave =
      share_w ? std::clamp<int64_t>(half_budget / std::max<int64_t>(w_tile_bytes, 1), 1, nn) : nn;
  thread_local std::vector<std::vector<float>> x_storage_of_caller, w_storage_of_caller;
  thread_local std::vector<PackedGemmOperand> x_packed_of_caller, w_packed_of_caller;
  std::vector<std::vector<float>>& x_storage = x_storage_of_caller;
  std::vector<std::vector<float>>& w_storage = w_storage_of_caller;
  std::vector<PackedGemmOperand>& x_packed = x_packed_of_caller;
  std::vector<PackedGemmOperand>& w_packed = w_packed_of_caller;
  if (share_x && static_cast<int64_t>(x_packed.size()) < x_wave) {
    x_packed.resize(static_cast<size_t>(x_wave));
    x_storage.resize(static_cast<size_t>(x_wave));
  }
  if (share_w && static_cast<int64_t>(w_packed.size()) < parts * w_wave) {
    w_packed.resize(static_cast<size_t>(parts * w_wave));
    w_storage.resize(static_cast<size_t>(parts * w_wave));
  }

  for (int64_t x0 = 0; x0 < nm; x0 += x_wave) {
    const int64_t x_tiles = std::min(x_wave, nm - x0);
    if (share_x) {
      cpu::parallel_for(x_tiles, c.num_threads, [&](int64_t t, int) {
        const int64_t m0 = (x0 + t) * tm;
        x_packed[t] = pack_gemm_lhs(x_rows(m0), std::min(tm, M - m0), K, gemm, x_storage[t]);
      });
    }
    for (int64_t w0 = 0; w0 < nn; w0 += w_wave) {
      const int64_t w_tiles = std::min(w_wave, nn - w0);
      if (share_w) {
        cpu::parallel_for(parts * w_tiles, c.num_threads, [&](int64_t i, int) {
          const int64_t n_i = w0 + i / parts;
          w_packed[i] = pack_gemm_rhs(w_columns(n_i, static_cast<int>(i % parts)), K, w_cols(n_i),
                                      gemm, w_storage[i]);
        });
      }
      // Row tiles outer, column tiles inner: consecutive tasks of one thread share the x rows.
      cpu::parallel_for(x_tiles * w_tiles, c.num_threads, [&](int64_t task, int) {
        const int64_t x_i = task / w_tiles, w_i = task % w_tiles;
        const int64_t m0 = (x0 + x_i) * tm, rows = std::min(tm, M - m0);
        const int64_t n_i = w0 + w_i, n0 = n_i * tn, cols = std::min(tn, N - n0);
        float* scratch = scratch_floats(static_cast<size_t>(tm * ld_scratch));
        // Part j of the task's product (whole_n: all 2N columns; else gate, then projection)
        // into its scratch columns, each side packed ahead or here.
        for (int j = 0; j < parts; ++j) {
          float* dst = scratch + j * tn;
          const int64_t width = w_cols(n_i);
          if (share_x && share_w) {
            cpu_gemm_f32(x_packed[x_i], w_packed[w_i * parts + j], dst, ld_scratch, false, gemm);
          } else if (share_x) {
            cpu_gemm_f32(x_packed[x_i], w_columns(n_i, j), width, dst, ld_scratch, false, gemm);
          } else if (share_w) {
            cpu_gemm_f32(x_rows(m0), w_packed[w_i * parts + j], rows, dst, ld_scratch, false, gemm);
          } else {
            cpu_gemm_f32(x_rows(m0), w_columns(n_i, j), rows, width, K, dst, ld_scratch, false,
                         gemm);
          }
        }
        // Epilogue: act(gate) * proj, straight into an f32 output; for 16-bit outputs in place over
        // the gate tile, then one rounding per element on the store.
        if (f32_out) {
          float* dst = reinterpret_cast<float*>(out_data) + m0 * N + n0;
          for (int64_t r = 0; r < rows; ++r) {
            const float* gate = scratch + r * ld_scratch;
            cpu_glu_row(activation, gate, gate + tn, dst + r * N, cols);
          }
        } else {
          for (int64_t r = 0; r < rows; ++r) {
            float* gate = scratch + r * ld_scratch;
            cpu_glu_row(activation, gate, gate + tn, gate, cols);
          }
          store_rows(scratch, ld_scratch, rows, cols, p.x_dtype,
                     out_data + (m0 * N + n0) * static_cast<int64_t>(x_size), N);
        }
      });
    }
  }
}

}  // namespace tokamax
