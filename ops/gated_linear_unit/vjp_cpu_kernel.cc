// gated_linear_unit_vjp on CPU: two phases of GEMM tasks on the shared engine.
//
// Dimensions: as vjp_cpu_config.h (tm, tn, tk, pn, mr, nr); W = [Wg | Wp] [K, 2N].
//
// Phase 1, one task per tile [tm, tn] of H: the gate and projection products of those columns
// again (g and p are not saved by the forward; recomputing them costs one forward, storing them
// M 2N floats of traffic each way), then H = [dout p act'(g) | dout act(g)] in place over them;
// the forward's task loop (glu_products), so shared x rows and weight columns are packed once.
// H stays in an f32 buffer [M, 2N] (the size of the forward's pre-activations, never [M, M]).
// Phase 2, one task per tile [tm, tn] of dx: dx = H W^T (W read transposed: its rows are
// contiguous along the contraction 2N). Phase 3, one task per tile [tm, tn] of the weight
// gradients: dW = x^T H (x read transposed: the contraction is over rows). Tiles in both
// dimensions keep every task tm rows tall (each packed panel serves tm rows) while still giving
// the cores enough tasks at token-batch M. Every task computes its whole contraction, so no two
// tasks write one element and nothing is reduced afterwards.
#include "ops/gated_linear_unit/vjp_cpu_kernel.h"

#include <algorithm>
#include <vector>

#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/activation.h"
#include "ops/common/cpu_activation.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
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
  // page-faulted and zeroed by the kernel each time (7% of a llama-MLP call, measured).
  thread_local cpu::ScratchBuffer h_buffer;
  float* h = h_buffer.floats(static_cast<size_t>(M * N2));
  // tile_m caps the row tiles of phases 1-2 (over M) and 3 (over K); each is cut evenly.
  const int64_t tm = even_tile(M, c.tile_m, c.mr), tk_rows = even_tile(K, c.tile_m, c.mr);

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
      });

  // Phase 2: dx tiles [tm, tn (a K range)] = H W^T; W [K, 2N] read transposed (fused: one
  // contraction over 2N; unfused: the two halves' products summed).
  const int64_t dx_cols = ceil_div(K, tn);
  const bool f32_x = p.x_dtype == DType::kF32;
  cpu::parallel_for(ceil_div(M, tm) * dx_cols, c.num_threads, [&](int64_t task, int) {
    const int64_t m0 = task / dx_cols * tm, rows = std::min(tm, M - m0);
    const int64_t k0 = task % dx_cols * tn, cols = std::min(tn, K - k0);
    const float* h_rows = h + m0 * N2;
    const int64_t w_row = k0 * w.ld * static_cast<int64_t>(w_size);
    float* out = f32_x ? reinterpret_cast<float*>(dx_data) + m0 * K + k0
                       : scratch_floats(static_cast<size_t>(rows * cols));
    const int64_t ld_out = f32_x ? K : cols;
    if (p.fused_weights) {
      cpu_gemm_f32({DType::kF32, h_rows, N2, false}, {p.w_dtype, gate + w_row, w.ld, true}, rows,
                   cols, N2, out, ld_out, false, gemm);
    } else {
      cpu_gemm_f32({DType::kF32, h_rows, N2, false}, {p.w_dtype, gate + w_row, w.ld, true}, rows,
                   cols, N, out, ld_out, false, gemm);
      cpu_gemm_f32({DType::kF32, h_rows + N, N2, false}, {p.w_dtype, proj + w_row, w.ld, true},
                   rows, cols, N, out, ld_out, true, gemm);
    }
    if (!f32_x) {
      store_rows(out, cols, rows, cols, p.x_dtype,
                 dx_data + (m0 * K + k0) * static_cast<int64_t>(x_size), K);
    }
  });

  // Phase 3: dW tiles [tk_rows (K range), tn (columns of one half)] = x^T H.
  struct Tile {
    int part;
    int64_t k0, rows, n0, cols;  // n0 within the part's N columns
  };
  std::vector<Tile> tiles;
  for (int part = 0; part < 2; ++part) {
    for (int64_t k0 = 0; k0 < K; k0 += tk_rows) {
      for (int64_t n0 = 0; n0 < N; n0 += tn) {
        tiles.push_back({part, k0, std::min(tk_rows, K - k0), n0, std::min(tn, N - n0)});
      }
    }
  }
  const bool f32_w = p.w_dtype == DType::kF32;
  cpu::parallel_for(static_cast<int64_t>(tiles.size()), c.num_threads, [&](int64_t i, int) {
    const Tile& t = tiles[static_cast<size_t>(i)];
    char* base = static_cast<char*>(t.part == 0 ? dw.gate : dw.proj);
    char* dst = base + (t.k0 * dw.ld + t.n0) * static_cast<int64_t>(w_size);
    const GemmOperand xt{p.x_dtype, x_data + t.k0 * static_cast<int64_t>(x_size), K, true};
    const GemmOperand hb{DType::kF32, h + t.part * N + t.n0, N2, false};
    if (f32_w) {
      cpu_gemm_f32(xt, hb, t.rows, t.cols, M, reinterpret_cast<float*>(dst), dw.ld, false, gemm);
      return;
    }
    float* tile = scratch_floats(static_cast<size_t>(t.rows * t.cols));
    cpu_gemm_f32(xt, hb, t.rows, t.cols, M, tile, t.cols, false, gemm);
    store_rows(tile, t.cols, t.rows, t.cols, p.w_dtype, dst, dw.ld);
  });
}

}  // namespace tokamax
