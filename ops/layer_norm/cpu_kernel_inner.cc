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
#include <cstdint>
#include <type_traits>

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

// v[0, n) *= inv_C, n a multiple of L (vectorized: the scalar loop keeps errno semantics).
HWY_INLINE void ScaleAll(DF d, float* HWY_RESTRICT v, int64_t n, float inv_C) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const VF k = hn::Set(d, inv_C);
  for (int64_t j = 0; j < n; j += L) hn::StoreU(hn::Mul(hn::LoadU(d, v + j), k), d, v + j);
}

// v[0, n) = 1 / sqrt(v * inv_C + eps): sums of squares to rstd, n a multiple of L. Vectorized
// (std::sqrt in a loop stays scalar for errno): a tenth of a block's time otherwise.
HWY_INLINE void RstdAll(DF d, float* HWY_RESTRICT v, int64_t n, float inv_C, float eps) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const VF k = hn::Set(d, inv_C), e = hn::Set(d, eps), one = hn::Set(d, 1.0f);
  for (int64_t j = 0; j < n; j += L) {
    hn::StoreU(hn::Div(one, hn::Sqrt(hn::MulAdd(hn::LoadU(d, v + j), k, e))), d, v + j);
  }
}

// One block of w inner elements of outer index o (other axes): x and out point at
// [o, 0, i0] of [O, C, I]; element (c, j) is at c * I + j. The block of x, [C, w] with rows I
// apart, is read from memory once (pass 1) and stays in L2 for passes 2 and 3, which re-read
// and re-widen it (cheaper than keeping an f32 copy: half the L2 footprint, so blocks twice as
// wide, i.e. twice longer sequential runs per row for DRAM). `stats` is an f32 scratch of
// 2 * w_pad: the per-column sums, then mean and rstd.
template <typename T, bool subtract_mean, bool kStream>
void BlockInnerAxis(const T* HWY_RESTRICT x, T* HWY_RESTRICT out, int64_t C, int64_t I, int64_t w,
                    const T* HWY_RESTRICT next, int64_t next_w, const float* HWY_RESTRICT scale,
                    const float* HWY_RESTRICT offset, float eps, float* HWY_RESTRICT stats,
                    bool native_bf16) {
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
    ScaleAll(d, sum, w_pad, inv_C);
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
  RstdAll(d, sum_sq, w_pad, inv_C, eps);
  // Pass 3 (L2 -> memory), row by row: sequential write streams.
  for (c = 0; c < C; ++c) {
    const T* HWY_RESTRICT xc = x + c * I;
    T* HWY_RESTRICT yc = out + c * I;
    const VF s = hn::Set(d, scale[c]), b = hn::Set(d, offset[c]);
    const T* HWY_RESTRICT nc = next + c * I;
    for (int64_t j = 0; j < w_main; j += L) {
      if ((j * static_cast<int64_t>(sizeof(T))) % 64 == 0 && j < next_w) {
        PrefetchRange(nc + j, 1);
      }
      const VF rs = hn::Mul(hn::LoadU(d, rstd + j), s);
      const VF dv = hn::Sub(LoadWiden(d, xc + j), hn::LoadU(d, mean + j));
      StoreNarrow<T, kStream>(d, hn::MulAdd(dv, rs, b), yc + j, native_bf16);
    }
    for (int64_t j = w_main; j < w; ++j) {
      yc[j] = Narrow<T>(std::fma(WidenScalar(xc[j]) - mean[j], rstd[j] * scale[c], offset[c]));
    }
    if (next_w > w_main) {
      PrefetchRange(nc + w_main, (next_w - w_main) * static_cast<int64_t>(sizeof(T)));
    }
  }
}

// Prefetches a block of rows (`rows` runs of `run_bytes`, `stride_bytes` apart) a line at a time,
// row by row, one line per Step: the kernel spreads the next block's prefetches over all three
// passes of the current block, so that its reads keep DRAM busy evenly (a burst in one pass
// overruns the core's outstanding misses and stalls it).
class LinePrefetcher {
 public:
  LinePrefetcher(const void* base, int64_t rows, int64_t run_bytes, int64_t stride_bytes)
      : row_(static_cast<const char*>(base)),
        end_row_(row_ + rows * stride_bytes),
        run_bytes_(run_bytes),
        stride_bytes_(stride_bytes) {
    if (run_bytes <= 0) row_ = end_row_;
  }
  HWY_INLINE void Step() {
    if (row_ == end_row_) return;
    PrefetchRange(row_ + offset_, 1);
    offset_ += 64;
    if (offset_ >= run_bytes_) {
      offset_ = 0;
      row_ += stride_bytes_;
    }
  }
  // The lines not yet prefetched, at once.
  void Finish() {
    while (row_ != end_row_) Step();
  }

 private:
  const char* row_;
  const char* end_row_;
  int64_t offset_ = 0;
  int64_t run_bytes_, stride_bytes_;
};

// sum_sq[j, j + kPairs * P) = sum_c (x[c, j..] - mean[j..])^2 in pair order, x re-read from L2;
// a line of the next block prefetched per row.
template <int kPairs>
HWY_INLINE void CentredPairs(DF d, const bf16* HWY_RESTRICT x, int64_t I, int64_t C, int64_t j,
                             const float* HWY_RESTRICT mean, float* HWY_RESTRICT sum_sq,
                             LinePrefetcher& next_lines) {
  constexpr int kV = 2 * kPairs;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  VF m[kV], a[kV];
  for (int v = 0; v < kV; ++v) {
    m[v] = hn::LoadU(d, mean + j + v * L);
    a[v] = hn::Zero(d);
  }
  for (int64_t c = 0; c < C; ++c) {
    next_lines.Step();
    const bf16* HWY_RESTRICT xc = x + c * I + j;
    VF v[kV];
    for (int q = 0; q < kPairs; ++q) LoadWidenPair(xc + 2 * q * L, v[2 * q], v[2 * q + 1]);
    for (int k = 0; k < kV; ++k) {
      const VF dv = hn::Sub(v[k], m[k]);
      a[k] = hn::MulAdd(dv, dv, a[k]);
    }
  }
  for (int v = 0; v < kV; ++v) hn::StoreU(a[v], d, sum_sq + j + v * L);
}

// BlockInnerAxis for bf16 on AVX-512 with avx512_bf16, columns [0, w2) with w2 a multiple of 2L:
// the same three passes over pairs of vectors (LoadWidenPair, StorePairBf16), per-column
// statistics in pair order. `stats` as BlockInnerAxis's.
template <bool subtract_mean, bool kStream>
void BlockInnerAxisPairs(const bf16* HWY_RESTRICT x, bf16* HWY_RESTRICT out, int64_t C, int64_t I,
                         int64_t w2, const bf16* HWY_RESTRICT next, int64_t next_w,
                         const float* HWY_RESTRICT scale, const float* HWY_RESTRICT offset,
                         float eps, float* HWY_RESTRICT stats) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t P = 2 * L;  // columns of a pair of vectors: 64 bytes of bf16, a cache line
  const float inv_C = 1.0f / static_cast<float>(C);
  float* HWY_RESTRICT sum = stats;          // [w2]: sum x, then the mean (pair order)
  float* HWY_RESTRICT sum_sq = stats + w2;  // [w2]: sum (x - mean)^2, then rstd (pair order)
  std::memset(stats, 0, sizeof(float) * 2 * w2);
  float* HWY_RESTRICT acc = subtract_mean ? sum : sum_sq;
  const int64_t T_size = static_cast<int64_t>(sizeof(bf16));
  LinePrefetcher next_lines(next, C, next_w * T_size, I * T_size);
  // Pass 1 (memory, or L2 when the previous block prefetched it): four rows at a time, a line of
  // each per pair; the rows kPrefetchRows ahead a line at a time as in BlockInnerAxis.
  int64_t c = 0;
  for (; c + 4 <= C; c += 4) {
    const bf16* HWY_RESTRICT xc = x + c * I;
    const int64_t ahead = std::clamp<int64_t>(C - (c + kPrefetchRows), 0, 4);
    const bf16* HWY_RESTRICT xp = x + (c + kPrefetchRows) * I;
    for (int64_t j = 0; j < w2; j += P) {
      for (int64_t k = 0; k < ahead; ++k) PrefetchRange(xp + k * I + j, 1);
      next_lines.Step();
      VF e[4], o[4];
      for (int k = 0; k < 4; ++k) LoadWidenPair(xc + k * I + j, e[k], o[k]);
      VF te, to;
      if constexpr (subtract_mean) {
        te = hn::Add(hn::Add(e[0], e[1]), hn::Add(e[2], e[3]));
        to = hn::Add(hn::Add(o[0], o[1]), hn::Add(o[2], o[3]));
      } else {
        te = hn::MulAdd(e[3], e[3],
                        hn::MulAdd(e[2], e[2], hn::MulAdd(e[1], e[1], hn::Mul(e[0], e[0]))));
        to = hn::MulAdd(o[3], o[3],
                        hn::MulAdd(o[2], o[2], hn::MulAdd(o[1], o[1], hn::Mul(o[0], o[0]))));
      }
      hn::StoreU(hn::Add(hn::LoadU(d, acc + j), te), d, acc + j);
      hn::StoreU(hn::Add(hn::LoadU(d, acc + j + L), to), d, acc + j + L);
    }
  }
  for (; c < C; ++c) {
    const bf16* HWY_RESTRICT xc = x + c * I;
    for (int64_t j = 0; j < w2; j += P) {
      VF e, o;
      LoadWidenPair(xc + j, e, o);
      const VF ae = hn::LoadU(d, acc + j), ao = hn::LoadU(d, acc + j + L);
      hn::StoreU(subtract_mean ? hn::Add(ae, e) : hn::MulAdd(e, e, ae), d, acc + j);
      hn::StoreU(subtract_mean ? hn::Add(ao, o) : hn::MulAdd(o, o, ao), d, acc + j + L);
    }
  }
  if constexpr (subtract_mean) {
    // Pass 2 (L2): centred sums of squares, four pairs at a time with the accumulators in
    // registers (a row's 4 lines per visit: the rows are on different pages, so wider chunks
    // mean fewer TLB misses).
    ScaleAll(d, sum, w2, inv_C);
    int64_t j = 0;
    for (; j + 4 * P <= w2; j += 4 * P) CentredPairs<4>(d, x, I, C, j, sum, sum_sq, next_lines);
    for (; j + 2 * P <= w2; j += 2 * P) CentredPairs<2>(d, x, I, C, j, sum, sum_sq, next_lines);
    for (; j < w2; j += P) CentredPairs<1>(d, x, I, C, j, sum, sum_sq, next_lines);
  }
  float* HWY_RESTRICT mean = sum;  // zeros for RMSNorm
  float* HWY_RESTRICT rstd = sum_sq;
  RstdAll(d, sum_sq, w2, inv_C, eps);
  // Pass 3 (L2 -> memory), row by row: sequential write streams. The rest of the task's next
  // block is prefetched on the way, so that its pass 1 finds it in L2.
  for (c = 0; c < C; ++c) {
    const bf16* HWY_RESTRICT xc = x + c * I;
    bf16* HWY_RESTRICT yc = out + c * I;
    const VF s = hn::Set(d, scale[c]), b = hn::Set(d, offset[c]);
    for (int64_t j = 0; j < w2; j += P) {
      next_lines.Step();
      VF e, o;
      LoadWidenPair(xc + j, e, o);
      const VF ye =
          hn::MulAdd(hn::Sub(e, hn::LoadU(d, mean + j)), hn::Mul(hn::LoadU(d, rstd + j), s), b);
      const VF yo = hn::MulAdd(hn::Sub(o, hn::LoadU(d, mean + j + L)),
                               hn::Mul(hn::LoadU(d, rstd + j + L), s), b);
      StorePairBf16<kStream>(ye, yo, yc + j);
    }
  }
  next_lines.Finish();
}

void InnerAxisTask(DType dtype, const void* x, void* out, int64_t offset_elements, int64_t C,
                   int64_t I, int64_t w, int64_t next_offset_elements, int64_t next_w,
                   const float* scale, const float* offset, float eps, bool subtract_mean,
                   bool stream, bool native_bf16, float* stats) {
  DispatchType(dtype, subtract_mean, stream, [&](auto type, auto mode, auto streaming) {
    using T = decltype(type);
    if constexpr (std::is_same_v<T, bf16> && kHasBf16PairPath) {
      // The pair kernel on whole lines of columns (its non-temporal stores need them 64-byte
      // aligned), the generic one on the rest of the block.
      const int64_t P = 2 * static_cast<int64_t>(hn::Lanes(DF()));
      const int64_t w2 = w / P * P;
      const bf16* xb = static_cast<const bf16*>(x) + offset_elements;
      bf16* ob = static_cast<bf16*>(out) + offset_elements;
      if (native_bf16 && w2 > 0) {
        const bool aligned = reinterpret_cast<uintptr_t>(ob) % 64 == 0 && I % P == 0;
        const bf16* next = static_cast<const bf16*>(x) + next_offset_elements;
        if (decltype(streaming)::value && aligned) {
          BlockInnerAxisPairs<decltype(mode)::value, true>(xb, ob, C, I, w2, next, next_w, scale,
                                                           offset, eps, stats);
        } else {
          BlockInnerAxisPairs<decltype(mode)::value, false>(xb, ob, C, I, w2, next, next_w, scale,
                                                            offset, eps, stats);
        }
        if (w2 < w) {
          BlockInnerAxis<T, decltype(mode)::value, false>(xb + w2, ob + w2, C, I, w - w2, next, 0,
                                                          scale, offset, eps, stats, native_bf16);
        }
        return;
      }
    }
    BlockInnerAxis<T, decltype(mode)::value, decltype(streaming)::value>(
        static_cast<const T*>(x) + offset_elements, static_cast<T*>(out) + offset_elements, C, I, w,
        static_cast<const T*>(x) + next_offset_elements, next_w, scale, offset, eps, stats,
        native_bf16);
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
                                int64_t C, int64_t I, int64_t w, int64_t next_offset_elements,
                                int64_t next_w, const float* scale, const float* offset, float eps,
                                bool subtract_mean, bool stream, bool native_bf16, float* stats) {
  HWY_DYNAMIC_DISPATCH(InnerAxisTask)
  (dtype, x, out, offset_elements, C, I, w, next_offset_elements, next_w, scale, offset, eps,
   subtract_mean, stream, native_bf16, stats);
}

}  // namespace tokamax
#endif  // HWY_ONCE
