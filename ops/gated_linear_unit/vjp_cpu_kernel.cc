// gated_linear_unit_vjp on CPU: two phases of GEMM tasks on the shared engine.
//
// Dimensions: as vjp_cpu_config.h (tm, tn, tk, pn, mr, nr); W = [Wg | Wp] [K, 2N].
//
// Phase 1, one task per row tile [tm] of x: the gate and projection products again (g and p
// are not saved by the forward; recomputing them costs one forward, storing them M 2N floats of
// traffic each way), H = [dout p act'(g) | dout act(g)] in place over them, then dx = H W^T
// (W read transposed: its rows are contiguous along the contraction 2N). H stays in an f32
// buffer [M, 2N] (the size of the forward's pre-activations, never [M, M] or [K, K]).
// Phase 2, one task per tile [tm, tn] of the weight gradients: dW = x^T H (x read transposed:
// the contraction is over rows). Every task computes its whole contraction, so no two tasks
// write one element and nothing is reduced afterwards.
#include "ops/gated_linear_unit/vjp_cpu_kernel.h"

#include <algorithm>
#include <vector>

#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/activation.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/dtype_dispatch.h"

namespace tokamax {
namespace {

float* scratch_floats(size_t count) {
  thread_local cpu::ScratchBuffer buffer;
  return buffer.floats(count);
}

// One row of H from the recomputed [g | p] (in place) and dout: the activation's value and
// derivative in f32, as the forward evaluates it.
template <typename D>
void form_h_row(Activation activation, const D* dout, int64_t N, float* row) {
  for (int64_t n = 0; n < N; ++n) {
    const float g = row[n], p = row[N + n];
    const float d = static_cast<float>(to_double(dout[n]));
    row[n] = d * p * activation_derivative<float>(activation, g);
    row[N + n] = d * apply_activation<float>(activation, g);
  }
}

}  // namespace

void glu_vjp_h_row(Activation activation, DType dout_dtype, const void* dout, int64_t N,
                   float* row) {
  dispatch_float(dout_dtype, [&](auto d_type) {
    using D = decltype(d_type);
    form_h_row(activation, static_cast<const D*>(dout), N, row);
  });
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
  std::vector<float> h(static_cast<size_t>(M * N2));
  const int64_t tm = c.tile_m;

  // Phase 1: per row tile, [g | p] -> H in place -> dx.
  cpu::parallel_for(ceil_div(M, tm), c.num_threads, [&](int64_t task, int) {
    const int64_t m0 = task * tm, rows = std::min(tm, M - m0);
    float* h_tile = h.data() + m0 * N2;
    const GemmOperand xa{p.x_dtype, x_data + m0 * K * static_cast<int64_t>(x_size), K, false};
    if (p.fused_weights) {
      cpu_gemm_f32(xa, {p.w_dtype, gate, w.ld, false}, rows, N2, K, h_tile, N2, false, gemm);
    } else {
      cpu_gemm_f32(xa, {p.w_dtype, gate, w.ld, false}, rows, N, K, h_tile, N2, false, gemm);
      cpu_gemm_f32(xa, {p.w_dtype, proj, w.ld, false}, rows, N, K, h_tile + N, N2, false, gemm);
    }
    const size_t d_size = dtype_size(dout.dtype());
    for (int64_t r = 0; r < rows; ++r) {
      glu_vjp_h_row(p.activation, dout.dtype(),
                    static_cast<const char*>(dout.raw()) + (m0 + r) * N * static_cast<int64_t>(d_size),
                    N, h_tile + r * N2);
    }
    // dx = H W^T: W [K, 2N] read transposed; unfused, the two halves' products summed.
    const bool f32_out = p.x_dtype == DType::kF32;
    float* out = f32_out ? reinterpret_cast<float*>(dx_data) + m0 * K
                         : scratch_floats(static_cast<size_t>(rows * K));
    if (p.fused_weights) {
      cpu_gemm_f32({DType::kF32, h_tile, N2, false}, {p.w_dtype, gate, w.ld, true}, rows, K, N2,
                   out, K, false, gemm);
    } else {
      cpu_gemm_f32({DType::kF32, h_tile, N2, false}, {p.w_dtype, gate, w.ld, true}, rows, K, N,
                   out, K, false, gemm);
      cpu_gemm_f32({DType::kF32, h_tile + N, N2, false}, {p.w_dtype, proj, w.ld, true}, rows, K,
                   N, out, K, true, gemm);
    }
    if (!f32_out) {
      store_rows(out, K, rows, K, p.x_dtype, dx_data + m0 * K * static_cast<int64_t>(x_size), K);
    }
  });

  // Phase 2: dW tiles [tm (K range), tn (columns of one half)] = x^T H.
  struct Tile {
    int part;
    int64_t k0, rows, n0, cols;  // n0 within the part's N columns
  };
  std::vector<Tile> tiles;
  const int64_t tn = c.tile_n;
  for (int part = 0; part < 2; ++part) {
    for (int64_t k0 = 0; k0 < K; k0 += tm) {
      for (int64_t n0 = 0; n0 < N; n0 += tn) {
        tiles.push_back({part, k0, std::min(tm, K - k0), n0, std::min(tn, N - n0)});
      }
    }
  }
  const bool f32_w = p.w_dtype == DType::kF32;
  cpu::parallel_for(static_cast<int64_t>(tiles.size()), c.num_threads, [&](int64_t i, int) {
    const Tile& t = tiles[static_cast<size_t>(i)];
    char* base = static_cast<char*>(t.part == 0 ? dw.gate : dw.proj);
    char* dst = base + (t.k0 * dw.ld + t.n0) * static_cast<int64_t>(w_size);
    const GemmOperand xt{p.x_dtype, x_data + t.k0 * static_cast<int64_t>(x_size), K, true};
    const GemmOperand hb{DType::kF32, h.data() + t.part * N + t.n0, N2, false};
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
