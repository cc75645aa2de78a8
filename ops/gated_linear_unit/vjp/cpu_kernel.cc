// gated_linear_unit_vjp on CPU: three phases of GEMM tasks on the shared engine.
//
// Dimensions: as cpu_config.h (tm, tn, tk, pn, mr, nr); W = [Wg | Wp] [K, 2N].
//
// Phase 1, one task per tile [tm, tn] of H: the gate and projection products of those columns
// again (g and p are not saved by the forward; recomputing them costs one forward, storing them
// M 2N floats of traffic each way), then H = [dout p act'(g) | dout act(g)] in place over them;
// the forward's task loop (glu_products). H stays in an f32 buffer [M, 2N] (the size of the
// forward's pre-activations, never [M, M]); with bf16_path native_dot or amx every product runs on
// bf16 pairs (vdpbf16ps), and phase 1 also rounds its H tiles into a bf16 copy of H, the operand of
// the other two. Phase 2, one task per tile [tm, tn] of dx: dx = H W^T
// (W read transposed: its rows are contiguous along the contraction 2N). Phase 3, one task per
// tile [tm, tn] of the weight gradients: dW = x^T H (x read transposed: the contraction is over
// rows). All three run on cpu_gemm_tiles (ops/common/cpu_gemm/tiles.h), which packs an operand
// tile that several tasks read once. Tiles in both dimensions keep every task tm rows tall
// while still giving the cores enough tasks at token-batch M. Every task computes its whole
// contraction, so no two tasks write one element and nothing is reduced afterwards.
#include "ops/gated_linear_unit/vjp/cpu_kernel.h"

#include <algorithm>

#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_target.h"
#include "ops/common/activation.h"
#include "ops/common/cpu_activation.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/cpu_gemm/tiles.h"
#include "ops/framework/dtype_dispatch.h"
#include "ops/gated_linear_unit/cpu_products_kernel.h"

namespace tokamax {
namespace {

float* scratch_floats(size_t count) {
  thread_local cpu::ScratchBuffer buffer;
  return buffer.floats(count);
}

}  // namespace

void glu_vjp_h_row(Activation activation, DType dout_dtype, const void* dout, int64_t n,
                   float* gate, float* proj) {
  if (dout_dtype == DType::kF32) {
    return cpu_glu_vjp_row(activation, static_cast<const float*>(dout), gate, proj, n);
  }
  // A 16-bit cotangent widened a segment at a time into a small stack buffer.
  constexpr int64_t kChunk = 256;
  float widened[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t count = std::min(kChunk, n - i);
    dispatch_float(dout_dtype, [&](auto d_type) {
      using D = decltype(d_type);
      const D* d = static_cast<const D*>(dout) + i;
      for (int64_t j = 0; j < count; ++j) widened[j] = static_cast<float>(to_double(d[j]));
    });
    cpu_glu_vjp_row(activation, widened, gate + i, proj + i, count);
  }
}

void gated_linear_unit_vjp_cpu_kernel(const GluVjpProblem& vp, const CpuGluVjpConfig& c,
                                      const Tensor& x, const GluWeights& w, const Tensor& dout,
                                      Tensor& dx, const GluWeightGrads& dw) {
  const GluProblem& p = vp.fwd;
  const int64_t M = p.M, K = p.K, N = p.N, N2 = 2 * N;
  if (M == 0 || K == 0) {
    // dx is [M, 0] or all of dW is an empty sum over M = 0 rows.
    dx.fill_zero();
    for (int part = 0; part < 2; ++part) {
      char* base = static_cast<char*>(part == 0 ? dw.gate : dw.proj);
      for (int64_t k = 0; k < K; ++k) {
        std::fill_n(base + k * dw.ld * static_cast<int64_t>(dtype_size(dw.dtype)),
                    N * static_cast<int64_t>(dtype_size(dw.dtype)), char(0));
      }
    }
    return;
  }
  const int lanes = cpu::simd_f32_lanes();
  CpuGemmOptions gemm;
  gemm.mr = c.mr;
  gemm.nr_vectors = c.nr / lanes;
  gemm.tk = c.tile_k;
  gemm.tn = c.panel_n;
  const size_t x_size = dtype_size(p.x_dtype), w_size = dtype_size(p.w_dtype);
  const char* x_data = static_cast<const char*>(x.raw());
  const char* gate = static_cast<const char*>(w.gate);
  const char* proj = static_cast<const char*>(w.proj);
  char* dx_data = static_cast<char*>(dx.raw());
  // H in a buffer of the calling thread that only grows: a fresh [M, 2N] per call would be
  // page-faulted and zeroed by the kernel each time (measured: docs/measurement_log.md,
  // "gated_linear_unit_vjp H buffer").
  thread_local cpu::ScratchBuffer h_buffer;
  float* h = h_buffer.floats(static_cast<size_t>(M * N2));
  // native_dot, amx: H rounded to bf16 [M, 2N] (the operand of phases 2 and 3), as JAX's autodiff
  // of a bf16 forward holds it; the error model has this rounding (glu_vjp_h_roundoff).
  const bool native = c.bf16_path != "convert_f32";
  thread_local cpu::ScratchBuffer h16_buffer;
  bf16* h16 =
      native ? reinterpret_cast<bf16*>(h16_buffer.floats(static_cast<size_t>(M * N))) : nullptr;
  gemm.engine = gemm_engine(c.bf16_path);
  // H's columns [col, ...) of row `row` as a product operand: bf16 with native_dot, else f32.
  auto h_operand = [&](int64_t row, int64_t col) {
    return native ? GemmOperand{DType::kBF16, h16 + row * N2 + col, N2, false}
                  : GemmOperand{DType::kF32, h + row * N2 + col, N2, false};
  };
  // tile_m caps the row tiles of phases 1-2 (over M) and 3 (over K); each is cut evenly, in
  // multiples of the tail tile's rows (micro_tile.h), so that the two cores' row tiles are equal
  // work: llama MLP f32 (M = 512) as 256 + 256 rows is 18 panels of 14 and a 4-row tail each,
  // where 266 + 246 would make the 19-panel tile the critical path (measured:
  // docs/measurement_log.md, "gated_linear_unit_vjp even row tiles").
  const int64_t tm = even_tile(M, c.tile_m, kTailRowStep);
  const int64_t tk_rows = even_tile(K, c.tile_m, kTailRowStep);

  const int64_t tn = c.tile_n;
  const size_t d_size = dtype_size(dout.dtype());
  const char* d_data = static_cast<const char*>(dout.raw());

  // Phase 1: H tiles [tm, tn]: the gate and projection columns [n0, n0 + cols) of rows
  // [m0, m0 + rows) straight into H (row r = [gate (N) | projection (N)], the fused weights'
  // layout: all of N in one product when it fits a tile), then H in place. The forward's task
  // loop, with each shared operand packed once (cpu_products_kernel.h).
  GluProductTiles h_tiles;
  h_tiles.tm = tm;
  h_tiles.tn = std::min<int64_t>(tn, N);
  h_tiles.whole_n = p.fused_weights && tn >= N;
  h_tiles.gemm = gemm;
  h_tiles.num_threads = c.num_threads;
  glu_products(
      p, h_tiles, x, w, N2,
      [&](const GluTask& t, int part) { return h + t.m0 * N2 + part * N + t.n0; },
      [&](const GluTask& t) {
        float* h_gate = h + t.m0 * N2 + t.n0;
        for (int64_t r = 0; r < t.rows; ++r) {
          glu_vjp_h_row(p.activation, dout.dtype(),
                        d_data + ((t.m0 + r) * N + t.n0) * static_cast<int64_t>(d_size), t.cols,
                        h_gate + r * N2, h_gate + N + r * N2);
        }
        if (native) {
          for (int part = 0; part < 2; ++part) {
            store_rows(h_gate + part * N, N2, t.rows, t.cols, DType::kBF16,
                       h16 + t.m0 * N2 + part * N + t.n0, N2);
          }
        }
      });

  // Phase 2: dx tiles [tm, tn (a K range)] = H W^T; W [K, 2N] read transposed (fused: one
  // contraction over 2N; unfused: the two halves' products summed). A row tile of H is packed
  // once for all its column tiles, a column tile of W^T once for all its row tiles.
  const bool f32_x = p.x_dtype == DType::kF32;
  GemmTileGrid dx_grid;
  dx_grid.rows = gemm_spans(M, tm);
  dx_grid.cols = gemm_spans(K, tn);
  dx_grid.K = p.fused_weights ? N2 : N;
  dx_grid.products = p.fused_weights ? 1 : 2;
  dx_grid.sum_products = true;
  dx_grid.gemm = gemm;
  dx_grid.num_threads = c.num_threads;
  // A dx tile: in dx itself (f32), or an f32 scratch of the task's thread, rounded in the
  // epilogue.
  auto dx_tile = [&](int64_t i, int64_t j) {
    const GemmSpan r = dx_grid.rows[i], k = dx_grid.cols[j];
    return f32_x ? GemmOut{reinterpret_cast<float*>(dx_data) + r.begin * K + k.begin, K}
                 : GemmOut{scratch_floats(static_cast<size_t>(r.extent * k.extent)), k.extent};
  };
  cpu_gemm_tiles(
      dx_grid, [&](int64_t i, int part) { return h_operand(dx_grid.rows[i].begin, part * N); },
      [&](int64_t j, int part) {
        const char* base = part == 0 ? gate : proj;
        return GemmOperand{p.w_dtype, base + dx_grid.cols[j].begin * w.ld * w_size, w.ld, true};
      },
      [&](int64_t i, int64_t j, int) { return dx_tile(i, j); },
      [&](int64_t i, int64_t j) {
        if (f32_x) return;
        const GemmSpan r = dx_grid.rows[i], k = dx_grid.cols[j];
        store_rows(dx_tile(i, j).c, k.extent, r.extent, k.extent, p.x_dtype,
                   dx_data + (r.begin * K + k.begin) * static_cast<int64_t>(x_size), K);
      });

  // Phase 3: dW tiles [tk_rows (K range), tn (columns of one half)] = x^T H: the column tiles
  // of both halves in one grid over H's 2N columns (none straddles the halves). A row tile of
  // x^T is packed once for all the column tiles, a column tile of H once for all the row tiles.
  const bool f32_w = p.w_dtype == DType::kF32;
  GemmTileGrid dw_grid;
  dw_grid.rows = gemm_spans(K, tk_rows);
  for (int part = 0; part < 2; ++part) {
    for (const GemmSpan& s : gemm_spans(N, tn)) {
      dw_grid.cols.push_back({part * N + s.begin, s.extent});
    }
  }
  dw_grid.K = M;
  dw_grid.gemm = gemm;
  dw_grid.num_threads = c.num_threads;
  // Where the tile's weight gradient starts in its output (gate or projection half).
  auto dw_dst = [&](int64_t i, int64_t j) {
    const int64_t col = dw_grid.cols[j].begin, part = col >= N ? 1 : 0;
    char* base = static_cast<char*>(part == 0 ? dw.gate : dw.proj);
    return base + (dw_grid.rows[i].begin * dw.ld + col - part * N) * static_cast<int64_t>(w_size);
  };
  auto dw_tile = [&](int64_t i, int64_t j) {
    return f32_w ? GemmOut{reinterpret_cast<float*>(dw_dst(i, j)), dw.ld}
                 : GemmOut{scratch_floats(static_cast<size_t>(dw_grid.rows[i].extent *
                                                              dw_grid.cols[j].extent)),
                           dw_grid.cols[j].extent};
  };
  cpu_gemm_tiles(
      dw_grid,
      [&](int64_t i, int) {
        return GemmOperand{p.x_dtype, x_data + dw_grid.rows[i].begin * static_cast<int64_t>(x_size),
                           K, true};
      },
      [&](int64_t j, int) { return h_operand(0, dw_grid.cols[j].begin); },
      [&](int64_t i, int64_t j, int) { return dw_tile(i, j); },
      [&](int64_t i, int64_t j) {
        if (f32_w) return;
        const int64_t cols = dw_grid.cols[j].extent;
        store_rows(dw_tile(i, j).c, cols, dw_grid.rows[i].extent, cols, p.w_dtype, dw_dst(i, j),
                   dw.ld);
      });
}

}  // namespace tokamax
