// layer_norm on CPU: the last-axis kernel, rows of C contiguous elements in interleaved groups.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//   w      inner elements of the current block (<= tI); w_pad = w rounded up to L
//   L      f32 lanes of the Highway target (16 on AVX-512, 8 on AVX2, 1 scalar)
//
// A row is contiguous; L lanes of the row per vector, partial vectors at the end of rows whose C
// is not a multiple of L go through a zero-padded copy in a scratch (masked out of the sums).
// Both kernels (RowGroup, with bf16 pairs of vectors on every SIMD target for C a multiple of 2L;
// RowGroup8Pairs for bf16 on AVX-512 with avx512_bf16, the AlphaFold shapes) take mean and
// variance from one pass of shifted sums over the group's rows (memory), then write the output
// widening the rows again (now in L1); a group with a row whose shift lies far from its mean
// (kMaxShiftRatio) takes corrected two-pass sums from L1 in between.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/layer_norm/cpu_tasks.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/layer_norm/cpu_kernel_last.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

#include "ops/layer_norm/cpu_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
// Internal linkage: other ops' Highway files define functions of the same names in the same
// per-target namespaces (tokamax::N_AVX3, ...), which the linker would otherwise merge.
namespace {

// Rows processed together by the last-axis kernel. A row of C = 64..128 is only 4-8 vectors, and
// its dependency chain (sum, horizontal reduction, mean, centred sum, reduction, sqrt, division,
// output) is far longer than its arithmetic: one row at a time runs at about a cycle per
// element, latency-bound. kRowGroup independent rows interleaved fill the pipeline.
constexpr int kRowGroup = 8;
// How many row groups ahead the last-axis kernel prefetches x.
constexpr int kPrefetchGroups = 4;

// Sums over kRows bf16 rows (rows C apart, C a multiple of 2L), in pair order: acc_sq[k] =
// sum d^2 and, with kCentred, acc[k] = sum d, where d = x - centre[k] (kCentred) or x. The
// centres stay in memory (a broadcast operand): 8 more live vectors would spill.
template <int kRows, bool kCentred>
HWY_INLINE void GroupSumsPairs(DF d, const bf16* HWY_RESTRICT x, int64_t C,
                               const float* HWY_RESTRICT centre, VF* HWY_RESTRICT acc,
                               VF* HWY_RESTRICT acc_sq) {
  const int64_t P = 2 * static_cast<int64_t>(hn::Lanes(d));
  for (int k = 0; k < kRows; ++k) {
    acc[k] = hn::Zero(d);
    acc_sq[k] = hn::Zero(d);
  }
  for (int64_t c = 0; c < C; c += P) {
    for (int k = 0; k < kRows; ++k) {
      VF e, o;
      LoadWidenPair(x + k * C + c, e, o);
      if constexpr (kCentred) {
        e = hn::Sub(e, hn::Set(d, centre[k]));
        o = hn::Sub(o, hn::Set(d, centre[k]));
        acc[k] = hn::Add(acc[k], hn::Add(e, o));
      }
      acc_sq[k] = hn::MulAdd(o, o, hn::MulAdd(e, e, acc_sq[k]));
    }
  }
}

// Pass 3 of kRows bf16 rows in pairs of vectors: out = (x * rstd - mean * rstd) * scale + offset
// (RMSNorm: x * rstd * scale), two FMAs per vector (the product mean * rstd rounds once: an
// error of u |mean| rstd, which the error model's A * rstd term covers), rounded back by
// StorePairBf16. r[k] and mr[k] hold rstd and mean * rstd of row k; scale_p and offset_p are in
// pair order. A line of `prefetch` per output pair, up to prefetch_bytes.
template <bool subtract_mean, bool kStream, int kRows>
HWY_INLINE void OutputPairs(DF d, const bf16* HWY_RESTRICT x, bf16* HWY_RESTRICT out, int64_t C,
                            const float* HWY_RESTRICT scale_p, const float* HWY_RESTRICT offset_p,
                            const VF* r, const VF* mr, const char* prefetch, int64_t prefetch_bytes,
                            bool native_bf16) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t prefetched = 0;  // bytes
  for (int64_t c = 0; c < C; c += 2 * L) {
    const VF se = hn::LoadU(d, scale_p + c), so = hn::LoadU(d, scale_p + c + L);
    const VF be = hn::LoadU(d, offset_p + c), bo = hn::LoadU(d, offset_p + c + L);
    for (int k = 0; k < kRows; ++k) {
      if (prefetched < prefetch_bytes) {
        hwy::Prefetch(prefetch + prefetched);
        prefetched += 64;
      }
      VF e, o;
      LoadWidenPair(x + k * C + c, e, o);
      if constexpr (subtract_mean) {
        e = hn::MulSub(e, r[k], mr[k]);
        o = hn::MulSub(o, r[k], mr[k]);
      } else {
        e = hn::Mul(e, r[k]);
        o = hn::Mul(o, r[k]);
      }
      StorePairBf16<kStream>(hn::MulAdd(e, se, be), hn::MulAdd(o, so, bo), out + k * C + c,
                             native_bf16);
    }
  }
  if (prefetched < prefetch_bytes)
    PrefetchRange(prefetch + prefetched, prefetch_bytes - prefetched);
}

// kRows consecutive rows of a last-axis problem from `x` / `out` ([kRows, C], row-major).
// `row` is an f32 scratch [kRows, C_pad] (C_pad = C rounded up to L); each row's zero-padded
// partial last vector sits at its end. Loops over k have a constant trip count and unroll.
// Re-reading the rows from L1 is faster for f32 than widening whole rows into the scratch and
// taking a centred second pass, and no slower for f16 (measured: docs/measurement_log.md,
// "layer_norm last-axis rows from L1").
// kPairs (bf16 rows with C a multiple of 2L, on every pair target): rows are widened and rounded
// back in pairs of vectors (GroupSumsPairs, OutputPairs; pair order, which the row sums ignore),
// and `scale` / `offset` come in pair order. On AVX2 the one-vector path is bound by its widening
// and rounding (a pack and a cross-lane permute per 8 lanes); the pairs halve them.
template <typename T, bool subtract_mean, bool kStream, int kRows, bool kPairs = false>
HWY_INLINE void RowGroup(const T* HWY_RESTRICT x, T* HWY_RESTRICT out, int64_t C, int64_t C_pad,
                         const float* HWY_RESTRICT scale, const float* HWY_RESTRICT offset,
                         float eps, float* HWY_RESTRICT row, int64_t prefetch_bytes,
                         bool native_bf16, int prefetch_groups) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t C_main = C / L * L;
  const size_t rest = static_cast<size_t>(C - C_main);
  const float inv_C = 1.0f / static_cast<float>(C);
  // The rows kPrefetchGroups groups ahead (the caller clamps to its range), a line per output
  // vector of pass 3 (never a burst that floods the prefetch queue); the rest after it.
  const char* prefetch = reinterpret_cast<const char*>(x + prefetch_groups * kRows * C);
  // Pass 1 (memory): RMSNorm sums x^2; layer norm shifts each row by its first element and sums
  // d = x - shift and d^2, so that mean and variance come out of this one pass (kMaxShiftRatio).
  // The rows stay in L1 and are widened again later; only a row's partial last vector goes
  // through the scratch (its zero-padded copy costs a memcpy). Padded lanes are masked.
  float shift[kRows] = {};
  if constexpr (subtract_mean) {
    for (int k = 0; k < kRows; ++k) shift[k] = WidenScalar(x[k * C]);
  }
  VF acc[kRows], acc_sq[kRows];
  // sum (x - centre[k]) (kCentred) and sum (x - centre[k])^2 over each row; the partial vector
  // from the scratch when `tail_in_scratch`, else widened there first.
  auto row_sums = [&](auto centred, const float* centre, bool tail_in_scratch) {
    constexpr bool kCentred = decltype(centred)::value;
    if constexpr (kPairs) {
      GroupSumsPairs<kRows, kCentred>(d, x, C, centre, acc, acc_sq);
      return;
    }
    for (int k = 0; k < kRows; ++k) {
      acc[k] = hn::Zero(d);
      acc_sq[k] = hn::Zero(d);
    }
    int64_t c = 0;
    for (; c < C_main; c += L) {
      for (int k = 0; k < kRows; ++k) {
        VF v = LoadWiden(d, x + k * C + c);
        if constexpr (kCentred) {
          v = hn::Sub(v, hn::Set(d, centre[k]));
          acc[k] = hn::Add(acc[k], v);
        }
        acc_sq[k] = hn::MulAdd(v, v, acc_sq[k]);
      }
    }
    if (rest != 0) {
      const auto mask = hn::FirstN(d, rest);
      for (int k = 0; k < kRows; ++k) {
        float* HWY_RESTRICT tail = row + k * C_pad + c;
        if (!tail_in_scratch) hn::StoreU(LoadWidenPartial(d, x + k * C + c, rest), d, tail);
        VF v = hn::LoadU(d, tail);
        if constexpr (kCentred) {
          v = hn::IfThenElseZero(mask, hn::Sub(v, hn::Set(d, centre[k])));
          acc[k] = hn::Add(acc[k], v);
        }
        acc_sq[k] = hn::MulAdd(v, v, acc_sq[k]);
      }
    }
  };
  row_sums(std::integral_constant<bool, subtract_mean>(), shift, false);
  float mean[kRows], rstd[kRows];
  bool far = false;  // some row's shift lies too far from its mean
  for (int k = 0; k < kRows; ++k) {
    const float ms = hn::GetLane(hn::SumOfLanes(d, acc_sq[k])) * inv_C;
    const float m = subtract_mean ? hn::GetLane(hn::SumOfLanes(d, acc[k])) * inv_C : 0.0f;
    rstd[k] = ms - m * m;  // the variance (RMSNorm: the mean of squares)
    mean[k] = shift[k] + m;
    far = far || m * m > kMaxShiftRatio * rstd[k];
  }
  if (subtract_mean && far) {
    // Pass 2 (L1), for a group with a row whose first element lies far from its mean (the
    // one-pass variance would cancel, and the mean carries the error of summing large terms):
    // the corrected two-pass sums about that mean, s1 = sum (x - mean), s2 = sum (x - mean)^2;
    // then mean += s1 / C, var = s2 / C - (s1 / C)^2.
    row_sums(std::true_type(), mean, true);
    for (int k = 0; k < kRows; ++k) {
      const float s1 = hn::GetLane(hn::SumOfLanes(d, acc[k])) * inv_C;
      mean[k] += s1;
      rstd[k] = hn::GetLane(hn::SumOfLanes(d, acc_sq[k])) * inv_C - s1 * s1;
    }
  }
  for (int k = 0; k < kRows; ++k) rstd[k] = 1.0f / std::sqrt(rstd[k] + eps);
  // Pass 3 (L1 -> memory): out = (x - mean) * (rstd * scale) + offset, one rounding to T (the
  // pairs: OutputPairs' two FMAs). scale and offset are padded to C_pad by the caller, so the
  // partial vector loads them whole.
  VF m[kRows], r[kRows];
  for (int k = 0; k < kRows; ++k) {
    m[k] = hn::Set(d, mean[k]);
    r[k] = hn::Set(d, rstd[k]);
  }
  if constexpr (kPairs) {
    VF mr[kRows];
    for (int k = 0; k < kRows; ++k) mr[k] = hn::Set(d, mean[k] * rstd[k]);
    OutputPairs<subtract_mean, kStream, kRows>(d, x, out, C, scale, offset, r, mr, prefetch,
                                               prefetch_bytes, native_bf16);
    return;
  }
  int64_t prefetched = 0;  // bytes
  int64_t c = 0;
  for (; c < C_main; c += L) {
    const VF s = hn::LoadU(d, scale + c), b = hn::LoadU(d, offset + c);
    for (int k = 0; k < kRows; ++k) {
      if (prefetched < prefetch_bytes) {
        hwy::Prefetch(prefetch + prefetched);
        prefetched += 64;
      }
      const VF dv = hn::Sub(LoadWiden(d, x + k * C + c), m[k]);
      StoreNarrow<T, kStream>(d, hn::MulAdd(dv, hn::Mul(r[k], s), b), out + k * C + c, native_bf16);
    }
  }
  if (rest != 0) {
    const VF s = hn::LoadU(d, scale + c), b = hn::LoadU(d, offset + c);
    for (int k = 0; k < kRows; ++k) {
      const VF dv = hn::Sub(hn::LoadU(d, row + k * C_pad + c), m[k]);
      StoreNarrowPartial(d, hn::MulAdd(dv, hn::Mul(r[k], s), b), out + k * C + c, rest);
    }
  }
  if (prefetched < prefetch_bytes)
    PrefetchRange(prefetch + prefetched, prefetch_bytes - prefetched);
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// The lane sums of a[0..8): lane 4k of the result holds the sum of a[k], lane 4k + 2 that of
// a[k + 4] (k < 4). A transposing tree, 23 instructions for the 8 rows instead of 8 per row.
HWY_INLINE VF SumsOf8(const VF* a) {
  __m512 u[4];
  for (int p = 0; p < 4; ++p) {  // rows 2p, 2p + 1: 8 partial lanes each
    const __m512 x = a[2 * p].raw, y = a[2 * p + 1].raw;
    u[p] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
  }
  // Rows 0..3 (4..7): 4 partial lanes each, a 128-bit block per row.
  const __m512 v0 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 v1 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  // Block k: rows k and k + 4, 2 partial lanes each; then the pairs added.
  const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(v0, v1, 0x44), _mm512_shuffle_ps(v0, v1, 0xEE));
  return VF{_mm512_add_ps(z, _mm512_shuffle_ps(z, z, 0xB1))};
}
// The lane of SumsOf8's result that holds row k's sum.
constexpr int kSumLane[8] = {0, 4, 8, 12, 2, 6, 10, 14};

// RowGroup for 8 bf16 rows with C a multiple of 2L on AVX-512 with avx512_bf16: the rows are
// widened and rounded back in pairs of vectors (LoadWidenPair, StorePairBf16; pair order, which
// the lane sums ignore), and the statistics of the 8 rows are computed together (SumsOf8, one
// vector square root and division). No f32 scratch: the 8 rows of bf16 (2 KiB for C = 128) stay
// in L1 and are re-widened in pass 3, one load and two ALU operations per 32 elements instead
// of two stores in pass 1 and two loads in pass 3 (measured: docs/measurement_log.md,
// "layer_norm last-axis rows from L1"). Layer norm's mean and variance come from one pass
// of shifted sums (kMaxShiftRatio), with a corrected two-pass fallback from L1. `scale_p`,
// `offset_p`: scale and offset in pair order.
template <bool subtract_mean, bool kStream>
HWY_INLINE void RowGroup8Pairs(const bf16* HWY_RESTRICT x, bf16* HWY_RESTRICT out, int64_t C,
                               const float* HWY_RESTRICT scale_p,
                               const float* HWY_RESTRICT offset_p, float eps,
                               int64_t prefetch_bytes, int prefetch_groups) {
  constexpr int kRows = 8;
  const DF d;
  const VF inv_C = hn::Set(d, 1.0f / static_cast<float>(C));
  const char* prefetch = reinterpret_cast<const char*>(x + prefetch_groups * kRows * C);
  // Pass 1 (memory): RMSNorm sums x^2; layer norm shifts each row by its first element and sums
  // d = x - shift and d^2, so that mean and variance come out of this one pass (kMaxShiftRatio).
  float shift[kRows] = {};
  if constexpr (subtract_mean) {
    for (int k = 0; k < kRows; ++k) shift[k] = WidenScalar(x[k * C]);
  }
  VF acc[kRows], acc_sq[kRows];
  GroupSumsPairs<kRows, subtract_mean>(d, x, C, shift, acc, acc_sq);
  // mean[kSumLane[k]]: row k's mean minus its shift (zero for RMSNorm).
  alignas(64) float mean[16] = {}, rstd[16];
  VF var = hn::Mul(SumsOf8(acc_sq), inv_C);
  if constexpr (subtract_mean) {
    VF m = hn::Mul(SumsOf8(acc), inv_C);
    var = hn::NegMulAdd(m, m, var);
    if (!hn::AllFalse(d, hn::Gt(hn::Mul(m, m), hn::Mul(hn::Set(d, kMaxShiftRatio), var)))) {
      // Pass 2 (L1), for a group with a row whose first element lies far from its mean (the
      // one-pass variance would cancel, and the mean carries the error of summing large terms):
      // the corrected two-pass sums about that mean, s1 = sum (x - mean), s2 = sum (x - mean)^2;
      // then mean += s1 / C, var = s2 / C - (s1 / C)^2.
      hn::Store(m, d, mean);
      float centre[kRows];
      for (int k = 0; k < kRows; ++k) centre[k] = shift[k] + mean[kSumLane[k]];
      GroupSumsPairs<kRows, true>(d, x, C, centre, acc, acc_sq);
      const VF s1 = hn::Mul(SumsOf8(acc), inv_C);
      m = hn::Add(m, s1);
      var = hn::NegMulAdd(s1, s1, hn::Mul(SumsOf8(acc_sq), inv_C));
    }
    hn::Store(m, d, mean);
  }
  hn::Store(hn::Div(hn::Set(d, 1.0f), hn::Sqrt(hn::Add(var, hn::Set(d, eps)))), d, rstd);
  // Pass 3 (L1 -> memory), as RowGroup's pairs.
  VF mr[kRows], r[kRows];
  for (int k = 0; k < kRows; ++k) {
    r[k] = hn::Set(d, rstd[kSumLane[k]]);
    mr[k] = hn::Set(d, (shift[k] + mean[kSumLane[k]]) * rstd[kSumLane[k]]);
  }
  OutputPairs<subtract_mean, kStream, kRows>(d, x, out, C, scale_p, offset_p, r, mr, prefetch,
                                             prefetch_bytes, /*native_bf16=*/true);
}
#endif

// Rows [row_begin, row_end) of a last-axis problem: x and out are [rows, C]; groups of
// kRowGroup rows, then single rows. `row` is an f32 scratch [kRowGroup, C_pad].
template <typename T, bool subtract_mean, bool kStream>
void RowsLastAxis(const T* HWY_RESTRICT x, T* HWY_RESTRICT out, int64_t row_begin, int64_t row_end,
                  int64_t C, const float* HWY_RESTRICT scale, const float* HWY_RESTRICT offset,
                  float eps, float* HWY_RESTRICT row, bool native_bf16) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t C_pad = (C + L - 1) / L * L;
  // Bytes of x to prefetch for the group at row r: the group kPrefetchGroups ahead, within the
  // task's rows.
  auto prefetch_bytes = [&](int64_t r, int64_t rows) {
    const int64_t ahead = r + kPrefetchGroups * rows;
    return std::clamp<int64_t>(row_end - ahead, 0, rows) * C * static_cast<int64_t>(sizeof(T));
  };
  // The task's first groups all at once: their misses then overlap instead of queueing behind
  // each other until the stream of prefetches ahead has started.
  PrefetchRange(x + row_begin * C,
                std::min<int64_t>(row_end - row_begin, kPrefetchGroups * kRowGroup) * C *
                    static_cast<int64_t>(sizeof(T)));
  int64_t r = row_begin;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (std::is_same_v<T, bf16> && kRowGroup == 8) {
    const int64_t P = 2 * L;
    // Non-temporal stores need every row 64-byte aligned: C a multiple of P and an aligned base.
    if (native_bf16 && C % P == 0 && (!kStream || reinterpret_cast<uintptr_t>(out) % 64 == 0)) {
      // scale and offset in pair order, after the row groups in the scratch.
      float* HWY_RESTRICT scale_p = row + kRowGroup * C_pad;
      float* HWY_RESTRICT offset_p = scale_p + C_pad;
      ToPairOrder(scale, C, scale_p);
      ToPairOrder(offset, C, offset_p);
      for (; r + kRowGroup <= row_end; r += kRowGroup) {
        RowGroup8Pairs<subtract_mean, kStream>(x + r * C, out + r * C, C, scale_p, offset_p, eps,
                                               prefetch_bytes(r, kRowGroup), kPrefetchGroups);
      }
    }
  }
#endif
  if constexpr (std::is_same_v<T, bf16> && kHasPairPath) {
    const int64_t P = 2 * L;
    // Non-temporal pair stores need every row aligned to 4L bytes: C a multiple of P and an
    // aligned base.
    if (r < row_end && C % P == 0 &&
        (!kStream || reinterpret_cast<uintptr_t>(out) % (2 * P) == 0)) {
      // scale and offset in pair order, after the row group in the scratch.
      float* HWY_RESTRICT scale_p = row + kRowGroup * C_pad;
      float* HWY_RESTRICT offset_p = scale_p + C_pad;
      ToPairOrder(scale, C, scale_p);
      ToPairOrder(offset, C, offset_p);
      for (; r + kRowGroup <= row_end; r += kRowGroup) {
        RowGroup<T, subtract_mean, kStream, kRowGroup, true>(
            x + r * C, out + r * C, C, C_pad, scale_p, offset_p, eps, row,
            prefetch_bytes(r, kRowGroup), native_bf16, kPrefetchGroups);
      }
      for (; r < row_end; ++r) {
        RowGroup<T, subtract_mean, kStream, 1, true>(x + r * C, out + r * C, C, C_pad, scale_p,
                                                     offset_p, eps, row, prefetch_bytes(r, 1),
                                                     native_bf16, kPrefetchGroups);
      }
    }
  }
  for (; r + kRowGroup <= row_end; r += kRowGroup) {
    RowGroup<T, subtract_mean, kStream, kRowGroup>(x + r * C, out + r * C, C, C_pad, scale, offset,
                                                   eps, row, prefetch_bytes(r, kRowGroup),
                                                   native_bf16, kPrefetchGroups);
  }
  for (; r < row_end; ++r) {
    RowGroup<T, subtract_mean, kStream, 1>(x + r * C, out + r * C, C, C_pad, scale, offset, eps,
                                           row, prefetch_bytes(r, 1), native_bf16, kPrefetchGroups);
  }
}

void LastAxisTask(DType dtype, const void* x, void* out, int64_t row_begin, int64_t row_end,
                  int64_t C, const float* scale, const float* offset, float eps, bool subtract_mean,
                  bool stream, bool native_bf16, float* row) {
  DispatchType(dtype, subtract_mean, stream, [&](auto type, auto mode, auto streaming) {
    using T = decltype(type);
    RowsLastAxis<T, decltype(mode)::value, decltype(streaming)::value>(
        static_cast<const T*>(x), static_cast<T*>(out), row_begin, row_end, C, scale, offset, eps,
        row, native_bf16);
  });
}

// Floats of the last-axis kernel's per-thread scratch for rows of C.
int64_t RowScratchFloats(int64_t C) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(DF()));
  // The row group, then scale and offset in pair order (RowGroup8Pairs).
  return (kRowGroup + 2) * ((C + L - 1) / L * L);
}

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {
namespace {
HWY_EXPORT(LastAxisTask);
HWY_EXPORT(RowScratchFloats);
}  // namespace

void layer_norm_last_axis_task(DType dtype, const void* x, void* out, int64_t row_begin,
                               int64_t row_end, int64_t C, const float* scale, const float* offset,
                               float eps, bool subtract_mean, bool stream, bool native_bf16,
                               float* row) {
  HWY_DYNAMIC_DISPATCH(LastAxisTask)
  (dtype, x, out, row_begin, row_end, C, scale, offset, eps, subtract_mean, stream, native_bf16,
   row);
}

int64_t layer_norm_row_scratch_floats(int64_t C) {
  return HWY_DYNAMIC_DISPATCH(RowScratchFloats)(C);
}

}  // namespace tokamax
#endif  // HWY_ONCE
