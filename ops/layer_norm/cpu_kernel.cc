// layer_norm on CPU: the Highway task bodies (last axis: per row; other axes: per inner block)
// and the task loop over the thread pool.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//   w      inner elements of the current block (<= tI); w_pad = w rounded up to L
//   L      f32 lanes of the Highway target (16 on AVX-512, 8 on AVX2, 1 scalar)
//
// The op is memory-bound (8 flops per 4 bytes of bf16 traffic), so the design goal is to touch
// DRAM exactly twice per element: read x once, write out once. A unit reads its x from memory
// once while summing (last axis: widened into an f32 row scratch in L1; other axes: the block of
// x stays in L2), then computes the centred sum of squares and the output from cache. Two
// statistics passes (mean, then sum (x - mean)^2) instead of one pass of sum x and sum x^2: the
// one-pass variance cancels catastrophically when |mean| >> sigma, and the second pass is free
// from cache. Software prefetch keeps reads in flight while a unit computes; non-temporal stores
// (optional) skip the read-for-ownership of out.
//
// Last axis (I = 1): a row is contiguous; L lanes of the row per vector, partial vectors at the
// end of rows whose C is not a multiple of L go through a zero-padded copy (masked out of the
// centred sum). Other axes: the C elements of a row are I apart, so vectorizing along the row
// would gather. Instead a block of w contiguous inner elements is w independent rows; vectors
// run across them and the reduction over C is a loop of vector adds into w accumulators (no
// transposition through memory). Columns of a block past the last multiple of L are scalar.
// Row groups of kRowGroup rows (last axis) interleave independent dependency chains.
#include "ops/layer_norm/cpu_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

#include "backends/cpu/cpu_info.h"
#include "backends/cpu/thread_pool.h"
#include "ops/errors.h"

// SSSE3/SSE4-only CPUs (pre-2013) take the scalar fallback: one target fewer to compile.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/layer_norm/cpu_kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/cache_control.h>
#include <hwy/highway.h>
#if HWY_ARCH_X86
#include <xmmintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
// Internal linkage: other ops' Highway files define helpers of the same names in the same
// per-target namespaces (tokamax::N_AVX3, ...), which the linker would otherwise merge.
namespace {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// L consecutive elements widened to f32 exactly (bf16 by a 16-bit shift, f16 by vcvtph2ps).
// Highway's scalar target converts f16 without inf/NaN; there the library's conversion is used.
template <typename T>
HWY_INLINE VF LoadWiden(DF d, const T* HWY_RESTRICT src) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(d, src);
  } else if constexpr (std::is_same_v<T, bf16>) {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(),
                                      reinterpret_cast<const hwy::bfloat16_t*>(src)));
  } else {
#if HWY_TARGET == HWY_SCALAR
    return hn::Set(d, f16_to_float(*src));
#else
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(),
                                      reinterpret_cast<const hwy::float16_t*>(src)));
#endif
  }
}

// The first `count` < L elements widened, the other lanes zero.
template <typename T>
HWY_INLINE VF LoadWidenPartial(DF d, const T* HWY_RESTRICT src, size_t count) {
  alignas(64) T padded[kMaxLanes] = {};
  std::memcpy(padded, src, count * sizeof(T));
  return LoadWiden(d, padded);
}

// f32 -> bf16 rounded to nearest even, exactly as float_to_bf16: add 0x7FFF plus the lowest kept
// bit and truncate; NaNs are forced quiet instead (rounding could carry them into infinity).
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> DemoteBf16(VF v) {
  const hn::RebindToUnsigned<DF> du32;
  const hn::RebindToSigned<DF> di32;
  const hn::Rebind<uint16_t, DF> du16;
  const auto bits = hn::BitCast(du32, v);
  const auto high = hn::ShiftRight<16>(bits);
  const auto bias = hn::Add(hn::Set(du32, 0x7FFFu), hn::And(high, hn::Set(du32, 1u)));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, bias));
  const auto quiet_nan = hn::Or(high, hn::Set(du32, 0x40u));
  const auto result = hn::IfThenElse(hn::RebindMask(du32, hn::IsNaN(v)), quiet_nan, rounded);
  // Every lane is < 2^16, so the saturating i32 -> u16 demotion is exact.
  return hn::DemoteTo(du16, hn::BitCast(di32, result));
}

// f32 -> bf16 by vcvtneps2bf16 (avx512_bf16): round to nearest even in one instruction instead
// of the ten of DemoteBf16, a quarter of the output pass. It flushes subnormal inputs to zero,
// which the error model allows for (base_reference.cc). Inline asm, because Highway 1.0.3 has
// no target with avx512_bf16 and the compiler would not inline an intrinsic of a wider target;
// callers run it only where the CPU has the instruction.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr bool kHasNativeBf16Path = true;
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> DemoteBf16Native(VF v) {
  __m256i narrow;
  asm("vcvtneps2bf16 %1, %0" : "=v"(narrow) : "v"(v.raw));
  return hn::Vec<hn::Rebind<uint16_t, DF>>{narrow};
}
#else
constexpr bool kHasNativeBf16Path = false;
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> DemoteBf16Native(VF v) { return DemoteBf16(v); }
#endif

// One f32 rounded to T (nearest even), as the scalar columns and partial vectors do.
template <typename T>
HWY_INLINE T Narrow(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, bf16>) {
    return float_to_bf16(v);
  } else {
    return float_to_f16(v);
  }
}

// L lanes rounded to T (nearest even) and stored; with kStream by a non-temporal store, which
// needs `dst` aligned to the narrow vector's size (the launch checks that).
template <bool kStream, class D, class V>
HWY_INLINE void StoreVec(D d, V v, hn::TFromD<D>* HWY_RESTRICT dst) {
  if constexpr (kStream) {
    hn::Stream(v, d, dst);
  } else {
    hn::StoreU(v, d, dst);
  }
}

template <typename T, bool kStream>
HWY_INLINE void StoreNarrow(DF d, VF v, T* HWY_RESTRICT dst, bool native_bf16) {
  if constexpr (std::is_same_v<T, float>) {
    StoreVec<kStream>(d, v, dst);
  } else if constexpr (std::is_same_v<T, bf16>) {
    const hn::Rebind<uint16_t, DF> du16;
    if (kHasNativeBf16Path && native_bf16) {
      StoreVec<kStream>(du16, DemoteBf16Native(v), reinterpret_cast<uint16_t*>(dst));
    } else {
      StoreVec<kStream>(du16, DemoteBf16(v), reinterpret_cast<uint16_t*>(dst));
    }
  } else {
#if HWY_TARGET == HWY_SCALAR
    *dst = float_to_f16(hn::GetLane(v));
#else
    // vcvtps2ph with round to nearest even; overflow goes to infinity.
    const hn::Rebind<hwy::float16_t, DF> dh;
    StoreVec<kStream>(dh, hn::DemoteTo(dh, v), reinterpret_cast<hwy::float16_t*>(dst));
#endif
  }
}

template <typename T>
HWY_INLINE void StoreNarrowPartial(DF d, VF v, T* HWY_RESTRICT dst, size_t count) {
  alignas(64) float lanes[kMaxLanes];
  hn::StoreU(v, d, lanes);
  for (size_t j = 0; j < count; ++j) dst[j] = Narrow<T>(lanes[j]);
}

// Software prefetch of [begin, begin + bytes) into the cache, a line at a time. The kernels read
// x in short bursts between stretches of arithmetic on cached data, which leaves the hardware
// prefetchers too little lead: alone they reach about a third of the copy bandwidth of a core.
// Into L2 on x86 (T1): a burst of L1 prefetches would fill the line-fill buffers that the demand
// loads of the current rows need.
HWY_INLINE void PrefetchRange(const void* begin, int64_t bytes) {
  const char* p = static_cast<const char*>(begin);
  for (int64_t offset = 0; offset < bytes; offset += 64) {
#if HWY_ARCH_X86
    _mm_prefetch(p + offset, _MM_HINT_T1);
#else
    hwy::Prefetch(p + offset);
#endif
  }
}

template <typename T>
HWY_INLINE float WidenScalar(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return to_float(v);
  }
}

// Rows processed together by the last-axis kernel. A row of C = 64..128 is only 4-8 vectors, and
// its dependency chain (sum, horizontal reduction, mean, centred sum, reduction, sqrt, division,
// output) is far longer than its arithmetic: one row at a time runs at about a cycle per
// element, latency-bound. kRowGroup independent rows interleaved fill the pipeline.
constexpr int kRowGroup = 8;
// How many row groups ahead the last-axis kernel prefetches x.
constexpr int kPrefetchGroups = 4;

// kRows consecutive rows of a last-axis problem from `x` / `out` ([kRows, C], row-major).
// `row` is an f32 scratch [kRows, C_pad] (C_pad = C rounded up to L): the widened rows, in L1
// for the two passes that follow. Loops over k have a constant trip count and unroll.
template <typename T, bool subtract_mean, bool kStream, int kRows>
HWY_INLINE void RowGroup(const T* HWY_RESTRICT x, T* HWY_RESTRICT out, int64_t C, int64_t C_pad,
                         const float* HWY_RESTRICT scale, const float* HWY_RESTRICT offset,
                         float eps, float* HWY_RESTRICT row, int64_t prefetch_bytes,
                         bool native_bf16) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t C_main = C / L * L;
  const size_t rest = static_cast<size_t>(C - C_main);
  const float inv_C = 1.0f / static_cast<float>(C);
  // The rows kPrefetchGroups groups ahead (the caller clamps to its range), a line per output
  // vector of pass 3 (never a burst that floods the prefetch queue); the rest after it.
  const char* prefetch = reinterpret_cast<const char*>(x + kPrefetchGroups * kRows * C);
  // Pass 1 (memory): widen into the scratch while summing x (layer norm) or x^2 (RMSNorm).
  // Zero-padded lanes add nothing to either.
  VF acc[kRows];
  for (int k = 0; k < kRows; ++k) acc[k] = hn::Zero(d);
  int64_t c = 0;
  for (; c < C_main; c += L) {
    for (int k = 0; k < kRows; ++k) {
      const VF v = LoadWiden(d, x + k * C + c);
      hn::StoreU(v, d, row + k * C_pad + c);
      acc[k] = subtract_mean ? hn::Add(acc[k], v) : hn::MulAdd(v, v, acc[k]);
    }
  }
  if (rest != 0) {
    for (int k = 0; k < kRows; ++k) {
      const VF v = LoadWidenPartial(d, x + k * C + c, rest);
      hn::StoreU(v, d, row + k * C_pad + c);
      acc[k] = subtract_mean ? hn::Add(acc[k], v) : hn::MulAdd(v, v, acc[k]);
    }
  }
  float mean[kRows], rstd[kRows];
  for (int k = 0; k < kRows; ++k) {
    const float first = hn::GetLane(hn::SumOfLanes(d, acc[k]));
    mean[k] = subtract_mean ? first * inv_C : 0.0f;
    rstd[k] = first;  // the sum of squares for RMSNorm
  }
  if constexpr (subtract_mean) {
    // Pass 2 (L1): the centred sum of squares; padded lanes are masked, (0 - mean)^2 is not 0.
    VF m[kRows];
    for (int k = 0; k < kRows; ++k) {
      m[k] = hn::Set(d, mean[k]);
      acc[k] = hn::Zero(d);
    }
    for (c = 0; c < C_main; c += L) {
      for (int k = 0; k < kRows; ++k) {
        const VF dv = hn::Sub(hn::LoadU(d, row + k * C_pad + c), m[k]);
        acc[k] = hn::MulAdd(dv, dv, acc[k]);
      }
    }
    if (rest != 0) {
      const auto mask = hn::FirstN(d, rest);
      for (int k = 0; k < kRows; ++k) {
        const VF dv = hn::IfThenElseZero(mask, hn::Sub(hn::LoadU(d, row + k * C_pad + c), m[k]));
        acc[k] = hn::MulAdd(dv, dv, acc[k]);
      }
    }
    for (int k = 0; k < kRows; ++k) rstd[k] = hn::GetLane(hn::SumOfLanes(d, acc[k]));
  }
  for (int k = 0; k < kRows; ++k) rstd[k] = 1.0f / std::sqrt(rstd[k] * inv_C + eps);
  // Pass 3 (L1 -> memory): out = (x - mean) * (rstd * scale) + offset, one rounding to T.
  // scale and offset are padded to C_pad by the caller, so the partial vector loads them whole.
  VF m[kRows], r[kRows];
  for (int k = 0; k < kRows; ++k) {
    m[k] = hn::Set(d, mean[k]);
    r[k] = hn::Set(d, rstd[k]);
  }
  int64_t prefetched = 0;  // bytes
  for (c = 0; c < C_main; c += L) {
    const VF s = hn::LoadU(d, scale + c), b = hn::LoadU(d, offset + c);
    for (int k = 0; k < kRows; ++k) {
      if (prefetched < prefetch_bytes) {
        hwy::Prefetch(prefetch + prefetched);
        prefetched += 64;
      }
      const VF dv = hn::Sub(hn::LoadU(d, row + k * C_pad + c), m[k]);
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
  for (; r + kRowGroup <= row_end; r += kRowGroup) {
    RowGroup<T, subtract_mean, kStream, kRowGroup>(x + r * C, out + r * C, C, C_pad, scale, offset,
                                                   eps, row, prefetch_bytes(r, kRowGroup),
                                                   native_bf16);
  }
  for (; r < row_end; ++r) {
    RowGroup<T, subtract_mean, kStream, 1>(x + r * C, out + r * C, C, C_pad, scale, offset, eps,
                                           row, prefetch_bytes(r, 1), native_bf16);
  }
}

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

// Type-erased entry points for the dispatch table: T and the RMSNorm switch become template
// arguments, so the per-element loops carry no branches.
template <typename Fn>
void DispatchType(DType dtype, bool subtract_mean, bool stream, Fn&& fn) {
  auto with_mode = [&](auto type) {
    auto with_stream = [&](auto mode) {
      if (stream) {
        fn(type, mode, std::true_type{});
      } else {
        fn(type, mode, std::false_type{});
      }
    };
    if (subtract_mean) {
      with_stream(std::true_type{});
    } else {
      with_stream(std::false_type{});
    }
  };
  switch (dtype) {
    case DType::kF32:
      return with_mode(float{});
    case DType::kBF16:
      return with_mode(bf16{});
    case DType::kF16:
      return with_mode(f16{});
    default:
      throw NotImplemented("cpu layer_norm: x dtype " + std::string(dtype_name(dtype)));
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

// Drains the write-combining buffers of non-temporal stores (sfence), so that the caller of the
// launch sees them once parallel_for returns.
void FlushStores() { hwy::FlushStream(); }

int F32Lanes() { return static_cast<int>(hn::Lanes(DF())); }
bool NativeBf16Path() { return kHasNativeBf16Path; }
// Floats of the last-axis kernel's per-thread scratch for rows of C.
int64_t RowScratchFloats(int64_t C) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(DF()));
  return kRowGroup * ((C + L - 1) / L * L);
}
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {
namespace {

HWY_EXPORT(LastAxisTask);
HWY_EXPORT(InnerAxisTask);
HWY_EXPORT(F32Lanes);
HWY_EXPORT(TargetName);
HWY_EXPORT(FlushStores);
HWY_EXPORT(NativeBf16Path);
HWY_EXPORT(RowScratchFloats);

constexpr size_t kAlignment = 64;

// Per-thread f32 scratch that only grows: pool threads are persistent, so after the first call
// a launch allocates nothing (a fresh allocation would page-fault on first touch every call).
float* thread_scratch(size_t floats) {
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buffer;
  const size_t bytes = (floats * sizeof(float) + kAlignment - 1) / kAlignment * kAlignment;
  if (bytes > buffer.bytes) {
    std::free(buffer.data);
    buffer.bytes = 0;
    buffer.data = std::aligned_alloc(kAlignment, bytes);
    if (buffer.data == nullptr) throw std::bad_alloc();
    buffer.bytes = bytes;
  }
  return static_cast<float*>(buffer.data);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int layer_norm_cpu_f32_lanes() { return HWY_DYNAMIC_DISPATCH(F32Lanes)(); }
bool layer_norm_cpu_has_native_bf16() {
  static const bool has =
      HWY_DYNAMIC_DISPATCH(NativeBf16Path)() && cpu::host_device().has("avx512_bf16");
  return has;
}
const char* layer_norm_cpu_target_name() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

void layer_norm_cpu_kernel(const LayerNormProblem& p, const CpuLayerNormLaunch& launch,
                           const void* x, const float* scale, const float* offset, void* out) {
  if (p.x_dtype != DType::kF32 && p.x_dtype != DType::kBF16 && p.x_dtype != DType::kF16) {
    throw NotImplemented("cpu layer_norm: x dtype " + std::string(dtype_name(p.x_dtype)) +
                         " (the kernel handles f32, bf16 and f16 with f32 statistics)");
  }
  if (p.num_elements() == 0) return;
  const int64_t C = p.C, I = p.I, L = layer_norm_cpu_f32_lanes();
  const float eps = static_cast<float>(p.epsilon);
  const int64_t per_task = std::max<int64_t>(launch.units_per_task, 1);
  const bool native_bf16 = launch.native_bf16 && layer_norm_cpu_has_native_bf16();
  if (p.last_axis()) {
    // Whole vectors of every row start at multiples of L elements from a 64-byte aligned base,
    // so non-temporal stores (aligned only) need C to be a multiple of L.
    const bool stream = launch.stream_stores && C % L == 0;
    const int64_t rows = p.O;
    const size_t row_floats = static_cast<size_t>(HWY_DYNAMIC_DISPATCH(RowScratchFloats)(C));
    cpu::parallel_for(ceil_div(rows, per_task), launch.num_threads, [&](int64_t task, int) {
      const int64_t begin = task * per_task, end = std::min(rows, begin + per_task);
      HWY_DYNAMIC_DISPATCH(LastAxisTask)
      (p.x_dtype, x, out, begin, end, C, scale, offset, eps, p.subtract_mean, stream, native_bf16,
       thread_scratch(row_floats));
      if (stream) HWY_DYNAMIC_DISPATCH(FlushStores)();
    });
    return;
  }
  const int64_t tI = std::clamp<int64_t>(launch.inner_block, 1, I);
  const int64_t blocks = ceil_div(I, tI);
  const int64_t units = p.O * blocks;
  const int64_t w_pad = ceil_div(tI, L) * L;
  // Vectors start at c * I + i0 + j with i0 a multiple of tI and j of L.
  const bool stream = launch.stream_stores && I % L == 0 && tI % L == 0;
  cpu::parallel_for(ceil_div(units, per_task), launch.num_threads, [&](int64_t task, int) {
    float* stats = thread_scratch(static_cast<size_t>(2 * w_pad));
    const int64_t end = std::min(units, (task + 1) * per_task);
    for (int64_t unit = task * per_task; unit < end; ++unit) {
      const int64_t o = unit / blocks, i0 = (unit % blocks) * tI;
      const int64_t w = std::min(tI, I - i0);
      HWY_DYNAMIC_DISPATCH(InnerAxisTask)
      (p.x_dtype, x, out, o * C * I + i0, C, I, w, scale, offset, eps, p.subtract_mean, stream,
       native_bf16, stats);
    }
    if (stream) HWY_DYNAMIC_DISPATCH(FlushStores)();
  });
}

}  // namespace tokamax
#endif  // HWY_ONCE
