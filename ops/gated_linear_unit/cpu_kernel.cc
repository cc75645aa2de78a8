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
// When N is split into several column tasks, the x rows of each row tile are packed once, before
// its tasks, instead of once per task (a token batch as one row tile with N in 8 tasks packed
// x 8 times: 5% of a llama-MLP call on Zen 3); row tiles go in waves under wave_bytes of packed
// rows.
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
  // x packed once per row tile when several tasks share it: the buffers of the calling thread,
  // kept between calls (a fresh allocation per call would be zeroed page by page).
  const bool share_rows = nn > 1 && K > 0;
  thread_local std::vector<std::vector<float>> packed_storage_of_caller;
  thread_local std::vector<PackedGemmOperand> packed_of_caller;
  std::vector<std::vector<float>>& packed_storage = packed_storage_of_caller;
  std::vector<PackedGemmOperand>& packed = packed_of_caller;
  const int64_t tile_bytes = round_up(tm, c.mr) * round_up(K, c.tile_k) * 4;
  const int64_t wave_tiles =
      share_rows ? std::clamp<int64_t>(wave_bytes / std::max<int64_t>(tile_bytes, 1), 1, nm) : nm;
  if (share_rows && static_cast<int64_t>(packed.size()) < wave_tiles) {
    packed.resize(static_cast<size_t>(wave_tiles));
    packed_storage.resize(static_cast<size_t>(wave_tiles));
  }

  for (int64_t wave0 = 0; wave0 < nm; wave0 += wave_tiles) {
    const int64_t tiles = std::min(wave_tiles, nm - wave0);
    if (share_rows) {
      cpu::parallel_for(tiles, c.num_threads, [&](int64_t t, int) {
        const int64_t m0 = (wave0 + t) * tm;
        packed[t] = pack_gemm_lhs(x_rows(m0), std::min(tm, M - m0), K, gemm, packed_storage[t]);
      });
    }
    // Row tiles outer, column tiles inner: consecutive tasks of one thread share the x rows, which
    // stay in cache when N is split.
    cpu::parallel_for(tiles * nn, c.num_threads, [&](int64_t task, int) {
      const int64_t m_i = wave0 + task / nn, n_i = task % nn;
      const int64_t m0 = m_i * tm, rows = std::min(tm, M - m0);
      const int64_t n0 = n_i * tn, cols = std::min(tn, N - n0);
      float* scratch = scratch_floats(static_cast<size_t>(tm * ld_scratch));
      GemmOperand b;
      b.dtype = p.w_dtype;
      b.ld = weights.ld;
      // One product of the task's x rows (packed ahead or here) by `cols` columns of b.
      auto product = [&](int64_t product_cols, float* dst) {
        if (share_rows) {
          cpu_gemm_f32(packed[task / nn], b, product_cols, dst, ld_scratch, false, gemm);
        } else {
          cpu_gemm_f32(x_rows(m0), b, rows, product_cols, K, dst, ld_scratch, false, gemm);
        }
      };
      if (whole_n) {
        // W [K, 2N] in one product: scratch row r = [gate (N) | projection (N)].
        b.data = gate_data;
        product(2 * N, scratch);
      } else {
        b.data = gate_data + n0 * static_cast<int64_t>(w_size);
        product(cols, scratch);
        b.data = proj_data + n0 * static_cast<int64_t>(w_size);
        product(cols, scratch + tn);
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

}  // namespace tokamax
