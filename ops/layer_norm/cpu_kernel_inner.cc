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

// Column sums over the C rows of one chunk of kV vectors, x re-read from L2 (rows I apart):
// out[j, j + kV * L) = sum_c x[c, j..] (kCentred false) or sum_c (x[c, j..] - mean[j..])^2.
template <int kV, bool kCentred, typename T>
HWY_INLINE void ColumnSums(DF d, const T* HWY_RESTRICT x, int64_t I, int64_t C, int64_t j,
                           const float* HWY_RESTRICT mean, float* HWY_RESTRICT out) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  VF m[kV], acc[kV];
  for (int v = 0; v < kV; ++v) {
    m[v] = kCentred ? hn::LoadU(d, mean + j + v * L) : hn::Zero(d);
    acc[v] = hn::Zero(d);
  }
  for (int64_t c = 0; c < C; ++c) {
    const T* HWY_RESTRICT xc = x + c * I + j;
    for (int v = 0; v < kV; ++v) {
      if constexpr (kCentred) {
        const VF dv = hn::Sub(LoadWiden(d, xc + v * L), m[v]);
        acc[v] = hn::MulAdd(dv, dv, acc[v]);
      } else {
        acc[v] = hn::Add(acc[v], LoadWiden(d, xc + v * L));
      }
    }
  }
  for (int v = 0; v < kV; ++v) hn::StoreU(acc[v], d, out + j + v * L);
}

// v[0, n) *= inv_C, n a multiple of L (vectorized: the scalar loop keeps errno semantics).
HWY_INLINE void ScaleAll(DF d, float* HWY_RESTRICT v, int64_t n, float inv_C) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const VF k = hn::Set(d, inv_C);
  for (int64_t j = 0; j < n; j += L) hn::StoreU(hn::Mul(hn::LoadU(d, v + j), k), d, v + j);
}

// The two-pass statistics of a block [C, w] from L2, for blocks whose shifted sums would cancel:
// mean = sum x / C into `mean`, then sum (x - mean)^2 into `sum_sq` ([w_pad] each; the padding
// columns zero). kInnerVectors column vectors at a time with the accumulators in registers.
template <typename T>
void TwoPassStats(DF d, const T* HWY_RESTRICT x, int64_t I, int64_t C, int64_t w,
                  float* HWY_RESTRICT mean, float* HWY_RESTRICT sum_sq) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t w_main = w / L * L, w_pad = (w + L - 1) / L * L;
  std::memset(mean, 0, sizeof(float) * w_pad);
  std::memset(sum_sq, 0, sizeof(float) * w_pad);
  auto chunks = [&](auto centred) {
    constexpr bool kCentred = decltype(centred)::value;
    int64_t j = 0;
    for (; j + kInnerVectors * L <= w_main; j += kInnerVectors * L) {
      ColumnSums<kInnerVectors, kCentred>(d, x, I, C, j, mean, kCentred ? sum_sq : mean);
    }
    for (; j < w_main; j += L)
      ColumnSums<1, kCentred>(d, x, I, C, j, mean, kCentred ? sum_sq : mean);
  };
  chunks(std::false_type());
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t j = w_main; j < w; ++j) mean[j] += WidenScalar(x[c * I + j]);
  }
  ScaleAll(d, mean, w_pad, 1.0f / static_cast<float>(C));
  chunks(std::true_type());
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t j = w_main; j < w; ++j) {
      const float dv = WidenScalar(x[c * I + j]) - mean[j];
      sum_sq[j] = std::fma(dv, dv, sum_sq[j]);
    }
  }
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

// Shifted one-pass sums to statistics, in place, n a multiple of L: sum = sum (x - shift) becomes
// the mean, sum_sq = sum (x - shift)^2 the variance. Returns false when some column's shift lies
// too far from its mean (kMaxShiftRatio), or its variance came out negative: the caller then
// recomputes that block's variance from centred sums.
HWY_INLINE bool ShiftedMoments(DF d, float* HWY_RESTRICT sum, float* HWY_RESTRICT sum_sq,
                               const float* HWY_RESTRICT shift, int64_t n, float inv_C) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const VF k = hn::Set(d, inv_C), limit = hn::Set(d, kMaxShiftRatio);
  auto bad = hn::Lt(k, hn::Zero(d));  // all false
  for (int64_t j = 0; j < n; j += L) {
    const VF m = hn::Mul(hn::LoadU(d, sum + j), k);
    const VF m2 = hn::Mul(m, m);
    const VF var = hn::Sub(hn::Mul(hn::LoadU(d, sum_sq + j), k), m2);
    bad = hn::Or(bad, hn::Gt(m2, hn::Mul(limit, var)));
    hn::StoreU(hn::Add(hn::LoadU(d, shift + j), m), d, sum + j);
    hn::StoreU(var, d, sum_sq + j);
  }
  return hn::AllFalse(d, bad);
}

// Pass 1's sums to statistics, n a multiple of L: `sum` becomes the mean (zeros for RMSNorm) and
// `sum_sq` rstd. Layer norm takes the shifted one-pass moments, or, when ShiftedMoments refuses,
// calls `two_pass()` to put the mean in `sum` and the centred sums of squares in `sum_sq`.
template <bool subtract_mean, typename TwoPass>
HWY_INLINE void FinishStats(DF d, float* HWY_RESTRICT sum, float* HWY_RESTRICT sum_sq,
                            const float* HWY_RESTRICT shift, int64_t n, float inv_C, float eps,
                            TwoPass&& two_pass) {
  if constexpr (subtract_mean) {
    if (ShiftedMoments(d, sum, sum_sq, shift, n, inv_C)) {
      RstdAll(d, sum_sq, n, 1.0f, eps);
      return;
    }
    two_pass();  // Pass 2 (L2): the block's statistics again, in two passes
  }
  RstdAll(d, sum_sq, n, inv_C, eps);
}

// One block of w inner elements of outer index o (other axes): x and out point at
// [o, 0, i0] of [O, C, I]; element (c, j) is at c * I + j. The block of x, [C, w] with rows I
// apart, is read from memory once (pass 1) and stays in L2 for pass 3 (and the rare pass 2),
// which re-read and re-widen it (cheaper than keeping an f32 copy: half the L2 footprint, so
// blocks twice as wide, i.e. twice longer sequential runs per row for DRAM). Layer norm's pass 1
// sums d = x - shift and d^2 with the shift the block's first row, so the statistics come out of
// one pass (ShiftedMoments); a block with a column whose shift is too far from its mean takes
// pass 2, centred sums from cache. `stats` is an f32 scratch of 3 * w_pad: the per-column sums
// (then mean), sums of squares (then rstd) and shifts. Where I * sizeof(T) is a multiple of
// 64 KiB on 2 MiB pages (the 768res axis-0 shapes), a column's rows share one L2 set, so only
// ~16 rows of the block stay in L2 and pass 3 reads the rest from L3 (docs/ops/layer_norm.md).
template <typename T, bool subtract_mean, bool kStream>
void BlockInnerAxis(const T* HWY_RESTRICT x, T* HWY_RESTRICT out, int64_t C, int64_t I, int64_t w,
                    const T* HWY_RESTRICT next, int64_t next_w, const float* HWY_RESTRICT scale,
                    const float* HWY_RESTRICT offset, float eps, float* HWY_RESTRICT stats,
                    bool native_bf16) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t w_main = w / L * L, w_pad = (w + L - 1) / L * L;
  const float inv_C = 1.0f / static_cast<float>(C);
  float* HWY_RESTRICT sum = stats;                // [w_pad]: sum (x - shift), then the mean
  float* HWY_RESTRICT sum_sq = stats + w_pad;     // [w_pad]: sum (x - shift)^2, then rstd
  float* HWY_RESTRICT shift = stats + 2 * w_pad;  // [w_pad]: row 0 (layer norm), zeros (RMS)
  std::memset(stats, 0, sizeof(float) * 3 * w_pad);
  if constexpr (subtract_mean) {
    for (int64_t j = 0; j < w_main; j += L) hn::StoreU(LoadWiden(d, x + j), d, shift + j);
    for (int64_t j = w_main; j < w; ++j) shift[j] = WidenScalar(x[j]);
  }
  // Pass 1 (memory): rows of the block are contiguous runs of w elements, I apart; accumulate
  // each column's sums (only the sum of squares for RMSNorm). Four rows at a time (four
  // sequential streams) add into the memory accumulators once.
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
      const VF s = hn::LoadU(d, shift + j);
      const VF v0 = hn::Sub(LoadWiden(d, xc + j), s), v1 = hn::Sub(LoadWiden(d, xc + I + j), s);
      const VF v2 = hn::Sub(LoadWiden(d, xc + 2 * I + j), s);
      const VF v3 = hn::Sub(LoadWiden(d, xc + 3 * I + j), s);
      const VF q = hn::MulAdd(v3, v3, hn::MulAdd(v2, v2, hn::MulAdd(v1, v1, hn::Mul(v0, v0))));
      hn::StoreU(hn::Add(hn::LoadU(d, sum_sq + j), q), d, sum_sq + j);
      if constexpr (subtract_mean) {
        const VF t = hn::Add(hn::Add(v0, v1), hn::Add(v2, v3));
        hn::StoreU(hn::Add(hn::LoadU(d, sum + j), t), d, sum + j);
      }
    }
    for (int64_t k = 0; k < ahead; ++k) {
      PrefetchRange(xp + k * I + w_main, (w - w_main) * static_cast<int64_t>(sizeof(T)));
    }
    for (int64_t j = w_main; j < w; ++j) {
      for (int64_t k = 0; k < 4; ++k) {
        const float v = WidenScalar(xc[k * I + j]) - shift[j];
        if constexpr (subtract_mean) sum[j] += v;
        sum_sq[j] = std::fma(v, v, sum_sq[j]);
      }
    }
  }
  for (; c < C; ++c) {
    const T* HWY_RESTRICT xc = x + c * I;
    for (int64_t j = 0; j < w_main; j += L) {
      const VF v = hn::Sub(LoadWiden(d, xc + j), hn::LoadU(d, shift + j));
      hn::StoreU(hn::MulAdd(v, v, hn::LoadU(d, sum_sq + j)), d, sum_sq + j);
      if constexpr (subtract_mean) hn::StoreU(hn::Add(hn::LoadU(d, sum + j), v), d, sum + j);
    }
    for (int64_t j = w_main; j < w; ++j) {
      const float v = WidenScalar(xc[j]) - shift[j];
      if constexpr (subtract_mean) sum[j] += v;
      sum_sq[j] = std::fma(v, v, sum_sq[j]);
    }
  }
  FinishStats<subtract_mean>(d, sum, sum_sq, shift, w_pad, inv_C, eps,
                             [&] { TwoPassStats(d, x, I, C, w, sum, sum_sq); });
  float* HWY_RESTRICT mean = sum;  // zeros for RMSNorm
  float* HWY_RESTRICT rstd = sum_sq;
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

// Column sums in pair order over one chunk of kPairs pairs, x re-read from L2: out[j, j + kPairs *
// P) = sum_c x[c, j..] (kCentred false) or sum_c (x[c, j..] - mean[j..])^2; a line of the next
// block prefetched per row.
template <int kPairs, bool kCentred>
HWY_INLINE void PairSums(DF d, const bf16* HWY_RESTRICT x, int64_t I, int64_t C, int64_t j,
                         const float* HWY_RESTRICT mean, float* HWY_RESTRICT out,
                         LinePrefetcher& next_lines) {
  constexpr int kV = 2 * kPairs;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  VF m[kV], a[kV];
  for (int v = 0; v < kV; ++v) {
    m[v] = kCentred ? hn::LoadU(d, mean + j + v * L) : hn::Zero(d);
    a[v] = hn::Zero(d);
  }
  for (int64_t c = 0; c < C; ++c) {
    next_lines.Step();
    const bf16* HWY_RESTRICT xc = x + c * I + j;
    VF v[kV];
    for (int q = 0; q < kPairs; ++q) LoadWidenPair(xc + 2 * q * L, v[2 * q], v[2 * q + 1]);
    for (int k = 0; k < kV; ++k) {
      if constexpr (kCentred) {
        const VF dv = hn::Sub(v[k], m[k]);
        a[k] = hn::MulAdd(dv, dv, a[k]);
      } else {
        a[k] = hn::Add(a[k], v[k]);
      }
    }
  }
  for (int v = 0; v < kV; ++v) hn::StoreU(a[v], d, out + j + v * L);
}

// TwoPassStats in pair order for the pair kernel's columns [0, w2): the mean into `mean`, then
// sum (x - mean)^2 into `sum_sq`, four pairs at a time with the accumulators in registers (a
// row's 4 lines per visit: fewer pages touched per line than one pair at a time).
void TwoPassPairs(DF d, const bf16* HWY_RESTRICT x, int64_t I, int64_t C, int64_t w2,
                  float* HWY_RESTRICT mean, float* HWY_RESTRICT sum_sq,
                  LinePrefetcher& next_lines) {
  const int64_t P = 2 * static_cast<int64_t>(hn::Lanes(d));
  auto chunks = [&](auto centred) {
    constexpr bool kCentred = decltype(centred)::value;
    float* HWY_RESTRICT out = kCentred ? sum_sq : mean;
    int64_t j = 0;
    for (; j + 4 * P <= w2; j += 4 * P) PairSums<4, kCentred>(d, x, I, C, j, mean, out, next_lines);
    for (; j + 2 * P <= w2; j += 2 * P) PairSums<2, kCentred>(d, x, I, C, j, mean, out, next_lines);
    for (; j < w2; j += P) PairSums<1, kCentred>(d, x, I, C, j, mean, out, next_lines);
  };
  chunks(std::false_type());
  ScaleAll(d, mean, w2, 1.0f / static_cast<float>(C));
  chunks(std::true_type());
}

// BlockInnerAxis for bf16 columns [0, w2) with w2 a multiple of 2L, on every SIMD target: the
// same passes over pairs of vectors (LoadWidenPair, StorePairBf16: rounded by vcvtne2ps2bf16 when
// `native`, else exactly), per-column statistics in pair order. `stats` as BlockInnerAxis's. On
// AVX2 the generic kernel is bound by its widening and rounding (a pack and a cross-lane permute
// per 8 lanes); the pairs halve them.
template <bool subtract_mean, bool kStream>
void BlockInnerAxisPairs(const bf16* HWY_RESTRICT x, bf16* HWY_RESTRICT out, int64_t C, int64_t I,
                         int64_t w2, const bf16* HWY_RESTRICT next, int64_t next_w,
                         const float* HWY_RESTRICT scale, const float* HWY_RESTRICT offset,
                         float eps, float* HWY_RESTRICT stats, bool native_bf16) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t P = 2 * L;  // columns of a pair of vectors: 64 bytes of bf16, a cache line
  const float inv_C = 1.0f / static_cast<float>(C);
  float* HWY_RESTRICT sum = stats;             // [w2]: sum (x - shift), then the mean
  float* HWY_RESTRICT sum_sq = stats + w2;     // [w2]: sum (x - shift)^2, then rstd
  float* HWY_RESTRICT shift = stats + 2 * w2;  // [w2]: row 0 (layer norm), zeros (RMS)
  std::memset(stats, 0, sizeof(float) * 3 * w2);
  if constexpr (subtract_mean) {
    for (int64_t j = 0; j < w2; j += P) {
      VF e, o;
      LoadWidenPair(x + j, e, o);
      hn::StoreU(e, d, shift + j);
      hn::StoreU(o, d, shift + j + L);
    }
  }
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
      if constexpr (subtract_mean) {
        const VF se = hn::LoadU(d, shift + j), so = hn::LoadU(d, shift + j + L);
        for (int k = 0; k < 4; ++k) {
          e[k] = hn::Sub(e[k], se);
          o[k] = hn::Sub(o[k], so);
        }
        const VF te = hn::Add(hn::Add(e[0], e[1]), hn::Add(e[2], e[3]));
        const VF to = hn::Add(hn::Add(o[0], o[1]), hn::Add(o[2], o[3]));
        hn::StoreU(hn::Add(hn::LoadU(d, sum + j), te), d, sum + j);
        hn::StoreU(hn::Add(hn::LoadU(d, sum + j + L), to), d, sum + j + L);
      }
      const VF qe = hn::MulAdd(e[3], e[3],
                               hn::MulAdd(e[2], e[2], hn::MulAdd(e[1], e[1], hn::Mul(e[0], e[0]))));
      const VF qo = hn::MulAdd(o[3], o[3],
                               hn::MulAdd(o[2], o[2], hn::MulAdd(o[1], o[1], hn::Mul(o[0], o[0]))));
      hn::StoreU(hn::Add(hn::LoadU(d, sum_sq + j), qe), d, sum_sq + j);
      hn::StoreU(hn::Add(hn::LoadU(d, sum_sq + j + L), qo), d, sum_sq + j + L);
    }
  }
  for (; c < C; ++c) {
    const bf16* HWY_RESTRICT xc = x + c * I;
    for (int64_t j = 0; j < w2; j += P) {
      VF e, o;
      LoadWidenPair(xc + j, e, o);
      e = hn::Sub(e, hn::LoadU(d, shift + j));
      o = hn::Sub(o, hn::LoadU(d, shift + j + L));
      if constexpr (subtract_mean) {
        hn::StoreU(hn::Add(hn::LoadU(d, sum + j), e), d, sum + j);
        hn::StoreU(hn::Add(hn::LoadU(d, sum + j + L), o), d, sum + j + L);
      }
      hn::StoreU(hn::MulAdd(e, e, hn::LoadU(d, sum_sq + j)), d, sum_sq + j);
      hn::StoreU(hn::MulAdd(o, o, hn::LoadU(d, sum_sq + j + L)), d, sum_sq + j + L);
    }
  }
  FinishStats<subtract_mean>(d, sum, sum_sq, shift, w2, inv_C, eps,
                             [&] { TwoPassPairs(d, x, I, C, w2, sum, sum_sq, next_lines); });
  float* HWY_RESTRICT mean = sum;  // zeros for RMSNorm
  float* HWY_RESTRICT rstd = sum_sq;
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
      StorePairBf16<kStream>(ye, yo, yc + j, native_bf16);
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
    if constexpr (std::is_same_v<T, bf16> && kHasPairPath) {
      // The pair kernel on whole lines of columns (its non-temporal stores need them aligned),
      // the generic one on the rest of the block.
      const int64_t P = 2 * static_cast<int64_t>(hn::Lanes(DF()));
      const int64_t w2 = w / P * P;
      const bf16* xb = static_cast<const bf16*>(x) + offset_elements;
      bf16* ob = static_cast<bf16*>(out) + offset_elements;
      if (w2 > 0) {
        const bool aligned = reinterpret_cast<uintptr_t>(ob) % 64 == 0 && I % P == 0;
        const bf16* next = static_cast<const bf16*>(x) + next_offset_elements;
        if (decltype(streaming)::value && aligned) {
          BlockInnerAxisPairs<decltype(mode)::value, true>(xb, ob, C, I, w2, next, next_w, scale,
                                                           offset, eps, stats, native_bf16);
        } else {
          BlockInnerAxisPairs<decltype(mode)::value, false>(xb, ob, C, I, w2, next, next_w, scale,
                                                            offset, eps, stats, native_bf16);
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
