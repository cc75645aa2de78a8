// layer_norm on CPU: the kernel for a non-last axis, blocks of contiguous inner elements.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//   w      inner elements of the current block (<= tI); w_pad = w rounded up to L
//   L      f32 lanes of the Highway target (16 on AVX-512, 8 on AVX2, 1 scalar)
//
// The C elements of a row are I apart, so vectorizing along the row would gather. Instead a
// block of w contiguous inner elements is w independent rows; vectors run across them and the
// reduction over C is a loop of vector adds into w accumulators (no transposition through
// memory). Columns of a block past the last multiple of L are scalar.
#include <algorithm>
#include <cmath>

#include "ops/layer_norm/cpu_tasks.h"

// SSSE3/SSE4-only CPUs (pre-2013) take the scalar fallback: one target fewer to compile.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/layer_norm/cpu_kernel_inner.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

#include "ops/layer_norm/cpu_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
// Internal linkage: other ops' Highway files define functions of the same names in the same
// per-target namespaces (tokamax::N_AVX3, ...), which the linker would otherwise merge.
namespace {

// How many rows of a block ahead the strided-axis kernel prefetches x.
constexpr int64_t kPrefetchRows = 8;

// Column vectors of a block whose pass-2 accumulators stay in registers together.
constexpr int kInnerVectors = 4;

// sum_sq[j, j + kV * L) += sum_c (x[c, j..] - mean[j..])^2 over the columns of one chunk, x
// re-read from L2 (rows I apart).
template <int kV, typename T>
HWY_INLINE void CentredSums(DF d, const T* HWY_RESTRICT x, int64_t I, int64_t C, int64_t j,
                            const float* HWY_RESTRICT mean, float* HWY_RESTRICT sum_sq) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  VF m[kV], acc[kV];
  for (int v = 0; v < kV; ++v) {
    m[v] = hn::LoadU(d, mean + j + v * L);
    acc[v] = hn::LoadU(d, sum_sq + j + v * L);
  }
  for (int64_t c = 0; c < C; ++c) {
    const T* HWY_RESTRICT xc = x + c * I + j;
    for (int v = 0; v < kV; ++v) {
      const VF dv = hn::Sub(LoadWiden(d, xc + v * L), m[v]);
      acc[v] = hn::MulAdd(dv, dv, acc[v]);
    }
  }
  for (int v = 0; v < kV; ++v) hn::StoreU(acc[v], d, sum_sq + j + v * L);
}

// One block of w inner elements of outer index o (other axes): x and out point at
// [o, 0, i0] of [O, C, I]; element (c, j) is at c * I + j. The block of x, [C, w] with rows I
// apart, is read from memory once (pass 1) and stays in L2 for passes 2 and 3, which re-read
// and re-widen it (cheaper than keeping an f32 copy: half the L2 footprint, so blocks twice as
// wide, i.e. twice longer sequential runs per row for DRAM). `stats` is an f32 scratch of
// 2 * w_pad: the per-column sums, then mean and rstd.
template <typename T, bool subtract_mean, bool kStream>
void BlockInnerAxis(const T* HWY_RESTRICT x, T* HWY_RESTRICT out, int64_t C, int64_t I, int64_t w,
                    const float* HWY_RESTRICT scale, const float* HWY_RESTRICT offset, float eps,
                    float* HWY_RESTRICT stats, bool native_bf16) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t w_main = w / L * L, w_pad = (w + L - 1) / L * L;
  const float inv_C = 1.0f / static_cast<float>(C);
  float* HWY_RESTRICT sum = stats;             // [w_pad]: sum x, then the mean
  float* HWY_RESTRICT sum_sq = stats + w_pad;  // [w_pad]: sum (x - mean)^2, then rstd
  std::memset(stats, 0, sizeof(float) * 2 * w_pad);
  // Pass 1 (memory): rows of the block are contiguous runs of w elements, I apart; accumulate
  // each column's sum (sum of squares for RMSNorm). Four rows at a time (four sequential
  // streams) add into the memory accumulators once.
  float* HWY_RESTRICT acc = subtract_mean ? sum : sum_sq;
  int64_t c = 0;
  for (; c + 4 <= C; c += 4) {
    const T* HWY_RESTRICT xc = x + c * I;
    // The block's rows kPrefetchRows ahead (rows are I apart: separate pages, separate streams),
    // a line of each per line of the current rows: spread out, so that the prefetch queue is
    // never flooded (a burst of whole rows gets dropped).
    const int64_t ahead = std::clamp<int64_t>(C - (c + kPrefetchRows), 0, 4);
    const T* HWY_RESTRICT xp = x + (c + kPrefetchRows) * I;
    for (int64_t j = 0; j < w_main; j += L) {
      if ((j * static_cast<int64_t>(sizeof(T))) % 64 == 0) {
        for (int64_t k = 0; k < ahead; ++k) PrefetchRange(xp + k * I + j, 1);
      }
      const VF v0 = LoadWiden(d, xc + j), v1 = LoadWiden(d, xc + I + j);
      const VF v2 = LoadWiden(d, xc + 2 * I + j), v3 = LoadWiden(d, xc + 3 * I + j);
      const VF a = hn::LoadU(d, acc + j);
      const VF t =
          subtract_mean
              ? hn::Add(hn::Add(v0, v1), hn::Add(v2, v3))
              : hn::MulAdd(v3, v3, hn::MulAdd(v2, v2, hn::MulAdd(v1, v1, hn::Mul(v0, v0))));
      hn::StoreU(hn::Add(a, t), d, acc + j);
    }
    for (int64_t k = 0; k < ahead; ++k) {
      PrefetchRange(xp + k * I + w_main, (w - w_main) * static_cast<int64_t>(sizeof(T)));
    }
    for (int64_t j = w_main; j < w; ++j) {
      for (int64_t k = 0; k < 4; ++k) {
        const float v = WidenScalar(xc[k * I + j]);
        acc[j] = subtract_mean ? acc[j] + v : std::fma(v, v, acc[j]);
      }
    }
  }
  for (; c < C; ++c) {
    const T* HWY_RESTRICT xc = x + c * I;
    for (int64_t j = 0; j < w_main; j += L) {
      const VF v = LoadWiden(d, xc + j);
      const VF a = hn::LoadU(d, acc + j);
      hn::StoreU(subtract_mean ? hn::Add(a, v) : hn::MulAdd(v, v, a), d, acc + j);
    }
    for (int64_t j = w_main; j < w; ++j) {
      const float v = WidenScalar(xc[j]);
      acc[j] = subtract_mean ? acc[j] + v : std::fma(v, v, acc[j]);
    }
  }
  if constexpr (subtract_mean) {
    // Pass 2 (L2): centred sums of squares, kInnerVectors column vectors at a time with the
    // accumulators in registers.
    for (int64_t j = 0; j < w; ++j) sum[j] *= inv_C;
    int64_t j = 0;
    for (; j + kInnerVectors * L <= w_main; j += kInnerVectors * L) {
      CentredSums<kInnerVectors>(d, x, I, C, j, sum, sum_sq);
    }
    for (; j < w_main; j += L) CentredSums<1>(d, x, I, C, j, sum, sum_sq);
    for (c = 0; c < C; ++c) {
      for (j = w_main; j < w; ++j) {
        const float dv = WidenScalar(x[c * I + j]) - sum[j];
        sum_sq[j] = std::fma(dv, dv, sum_sq[j]);
      }
    }
  }
  float* HWY_RESTRICT mean = sum;  // zeros for RMSNorm
  float* HWY_RESTRICT rstd = sum_sq;
  for (int64_t j = 0; j < w; ++j) rstd[j] = 1.0f / std::sqrt(sum_sq[j] * inv_C + eps);
  // Pass 3 (L2 -> memory), row by row: sequential write streams.
  for (c = 0; c < C; ++c) {
    const T* HWY_RESTRICT xc = x + c * I;
    T* HWY_RESTRICT yc = out + c * I;
    const VF s = hn::Set(d, scale[c]), b = hn::Set(d, offset[c]);
    for (int64_t j = 0; j < w_main; j += L) {
      const VF rs = hn::Mul(hn::LoadU(d, rstd + j), s);
      const VF dv = hn::Sub(LoadWiden(d, xc + j), hn::LoadU(d, mean + j));
      StoreNarrow<T, kStream>(d, hn::MulAdd(dv, rs, b), yc + j, native_bf16);
    }
    for (int64_t j = w_main; j < w; ++j) {
      yc[j] = Narrow<T>(std::fma(WidenScalar(xc[j]) - mean[j], rstd[j] * scale[c], offset[c]));
    }
  }
}

void InnerAxisTask(DType dtype, const void* x, void* out, int64_t offset_elements, int64_t C,
                   int64_t I, int64_t w, const float* scale, const float* offset, float eps,
                   bool subtract_mean, bool stream, bool native_bf16, float* stats) {
  DispatchType(dtype, subtract_mean, stream, [&](auto type, auto mode, auto streaming) {
    using T = decltype(type);
    BlockInnerAxis<T, decltype(mode)::value, decltype(streaming)::value>(
        static_cast<const T*>(x) + offset_elements, static_cast<T*>(out) + offset_elements, C, I, w,
        scale, offset, eps, stats, native_bf16);
  });
}

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {
namespace {
HWY_EXPORT(InnerAxisTask);
}  // namespace

void layer_norm_inner_axis_task(DType dtype, const void* x, void* out, int64_t offset_elements,
                                int64_t C, int64_t I, int64_t w, const float* scale,
                                const float* offset, float eps, bool subtract_mean, bool stream,
                                bool native_bf16, float* stats) {
  HWY_DYNAMIC_DISPATCH(InnerAxisTask)
  (dtype, x, out, offset_elements, C, I, w, scale, offset, eps, subtract_mean, stream, native_bf16,
   stats);
}

}  // namespace tokamax
#endif  // HWY_ONCE
