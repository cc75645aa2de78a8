// triangle_multiplication on CPU: the three phases.
#include "ops/triangle_multiplication/cpu_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/host_memory.h"
#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_activation.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/framework/dtype_dispatch.h"
#include "ops/triangle_multiplication/rows.h"

namespace tokamax {
namespace {

// An uninitialized host buffer of `count` elements (every element is written before it is read).
template <typename T>
std::unique_ptr<T, void (*)(void*)> buffer(int64_t count) {
  return {static_cast<T*>(cpu::allocate_host(static_cast<size_t>(count) * sizeof(T))),
          cpu::free_host};
}

template <typename V>
float* grown(V& v, int64_t count) {
  if (static_cast<int64_t>(v.size()) < count) v.resize(static_cast<size_t>(count));
  return v.data();
}

}  // namespace

char* TriangleCpuBuffers::plane(const TriangleMultiplicationProblem& p, int64_t t) const {
  return planes.get() + t * p.positions() * static_cast<int64_t>(dtype_size(plane_dtype));
}

TriangleCpuBuffers triangle_cpu_buffers(const TriangleMultiplicationProblem& p) {
  // The planes in x's dtype for 16-bit inputs (rounded once, as the error model allows; half the
  // bytes for the triangle product to read), else f32.
  TriangleCpuBuffers b;
  b.plane_dtype = p.x_dtype;
  b.planes = buffer<char>(2 * p.H * p.positions() * static_cast<int64_t>(dtype_size(p.x_dtype)));
  b.gates = buffer<float>(p.positions() * p.D);
  b.act = buffer<float>(p.H * p.positions());
  return b;
}

CpuGemmOptions triangle_gemm_options(const CpuTriangleConfig& c) {
  return {.mr = c.mr,
          .nr_vectors = c.nr / cpu::simd_f32_lanes(),
          .tk = c.tile_k,
          .tn = c.panel_n,
          .engine = GemmEngine::kF32Fma};
}

void triangle_widen_x(const TriangleMultiplicationProblem& p, const Tensor& x, int64_t q0,
                      int64_t rows, float* xw) {
  dispatch_float(p.x_dtype, [&](auto type) {
    using T = decltype(type);
    const T* src = x.data<T>() + q0 * p.C;
    for (int64_t e = 0; e < rows * p.C; ++e) xw[e] = to_float(src[e]);
  });
}

void triangle_cpu_project(const TriangleMultiplicationProblem& p, const CpuTriangleConfig& c,
                          const TensorMap& inputs, const TriangleWeightsF32& w,
                          const PackedGemmOperand& w_in_packed, TriangleCpuBuffers& buffers) {
  const int64_t C = p.C, H = p.H, D = p.D, P = p.positions(), W = 4 * H + D;
  const CpuGemmOptions gemm = triangle_gemm_options(c);
  const float epsilon = static_cast<float>(p.epsilon);
  const bool* mask = inputs.at("mask").data<bool>();
  const int64_t plane_size = static_cast<int64_t>(dtype_size(buffers.plane_dtype));
  const int64_t tm = std::max<int64_t>(c.tile_m, 1);
  cpu::parallel_for(ceil_div(P, tm), c.num_threads, [&](int64_t task, int) {
    thread_local std::vector<float> a, y, t_buffer;
    const int64_t q0 = task * tm, rows = std::min(tm, P - q0);
    float* a_tile = grown(a, rows * C);
    float* y_tile = grown(y, rows * W);
    // x's rows widened to f32 and normalized.
    triangle_widen_x(p, inputs.at("x"), q0, rows, a_tile);
    for (int64_t r = 0; r < rows; ++r) {
      layer_norm_row(a_tile + r * C, C, w.in_scale.data(), w.in_offset.data(), epsilon);
    }
    cpu_gemm_f32({DType::kF32, a_tile, C}, w_in_packed, rows, y_tile, W, /*accumulate=*/false,
                 gemm);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = y_tile + r * W;
      cpu_glu_row(Activation::kSigmoid, row, row + 2 * H, row, 2 * H);
      if (!mask[q0 + r]) std::fill_n(row, 2 * H, 0.0f);
      cpu_activation_row(Activation::kSigmoid, row + 4 * H, D);
      std::copy_n(row + 4 * H, D, buffers.gates.get() + (q0 + r) * D);
    }
    // The tile's v transposed into the planes: contiguous runs of positions per channel.
    float* column = grown(t_buffer, rows);
    for (int64_t t = 0; t < 2 * H; ++t) {
      for (int64_t r = 0; r < rows; ++r) column[r] = y_tile[r * W + t];
      store_rows(column, rows, 1, rows, buffers.plane_dtype, buffers.plane(p, t) + q0 * plane_size,
                 rows);
    }
  });
}

void triangle_cpu_product(const TriangleMultiplicationProblem& p, const CpuTriangleConfig& c,
                          TriangleCpuBuffers& buffers) {
  const int64_t N = p.N, H = p.H, P = p.positions();
  const CpuGemmOptions gemm = triangle_gemm_options(c);
  const DType dtype = buffers.plane_dtype;
  const int64_t plane_size = static_cast<int64_t>(dtype_size(dtype));
  const int64_t tm = std::max<int64_t>(c.tile_m, 1);
  const int64_t row_tiles = ceil_div(N, tm);
  cpu::parallel_for(H * row_tiles, c.num_threads, [&](int64_t task, int) {
    const int64_t h = task / row_tiles, i0 = task % row_tiles * tm, rows = std::min(tm, N - i0);
    const char* L = buffers.plane(p, h);
    const char* R = buffers.plane(p, H + h);
    float* dst = buffers.act.get() + h * P + i0 * N;
    if (p.outgoing) {  // act[i, j] = sum_k L[i, k] R[j, k]
      cpu_gemm_f32({dtype, L + i0 * N * plane_size, N}, {dtype, R, N, /*transposed=*/true}, rows, N,
                   N, dst, N, /*accumulate=*/false, gemm);
    } else {  // act[i, j] = sum_k R[k, i] L[k, j]
      cpu_gemm_f32({dtype, R + i0 * plane_size, N, /*transposed=*/true}, {dtype, L, N}, rows, N, N,
                   dst, N, /*accumulate=*/false, gemm);
    }
  });
}

void triangle_multiplication_cpu_kernel(const TriangleMultiplicationProblem& p,
                                        const CpuTriangleConfig& c, const TensorMap& inputs,
                                        Tensor& out) {
  const int64_t H = p.H, D = p.D, P = p.positions(), W = 4 * H + D;
  const CpuGemmOptions gemm = triangle_gemm_options(c);
  const float epsilon = static_cast<float>(p.epsilon);
  const TriangleWeightsF32 w = triangle_weights_f32(p, inputs);
  // The weights as f32 [C, W] and [H, D], packed once for every task.
  GemmPackStorage in_storage, out_storage;
  const PackedGemmOperand in_packed =
      pack_gemm_rhs({DType::kF32, w.w_in.data(), W}, p.C, W, gemm, in_storage);
  const PackedGemmOperand out_packed =
      pack_gemm_rhs({DType::kF32, w.projection_out.data(), D}, H, D, gemm, out_storage);
  TriangleCpuBuffers buffers = triangle_cpu_buffers(p);
  triangle_cpu_project(p, c, inputs, w, in_packed, buffers);
  triangle_cpu_product(p, c, buffers);

  // Phase 3: output norm, projection, gate.
  const size_t x_size = dtype_size(p.x_dtype);
  char* o = static_cast<char*>(out.raw());
  const int64_t tm = std::max<int64_t>(c.tile_m, 1);
  cpu::parallel_for(ceil_div(P, tm), c.num_threads, [&](int64_t task, int) {
    thread_local std::vector<float> b, z;
    const int64_t q0 = task * tm, rows = std::min(tm, P - q0);
    float* b_tile = grown(b, rows * H);
    float* z_tile = grown(z, rows * D);
    for (int64_t h = 0; h < H; ++h) {
      const float* plane = buffers.act.get() + h * P + q0;
      for (int64_t r = 0; r < rows; ++r) b_tile[r * H + h] = plane[r];
    }
    for (int64_t r = 0; r < rows; ++r) {
      layer_norm_row(b_tile + r * H, H, w.out_scale.data(), w.out_offset.data(), epsilon);
    }
    cpu_gemm_f32({DType::kF32, b_tile, H}, out_packed, rows, z_tile, D, /*accumulate=*/false, gemm);
    for (int64_t r = 0; r < rows; ++r) {
      const float* g = buffers.gates.get() + (q0 + r) * D;
      float* row = z_tile + r * D;
      for (int64_t d = 0; d < D; ++d) row[d] *= g[d];
    }
    store_rows(z_tile, D, rows, D, p.x_dtype, o + q0 * D * x_size, D);
  });
}

}  // namespace tokamax
