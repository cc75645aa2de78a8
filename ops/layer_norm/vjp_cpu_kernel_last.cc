// layer_norm_vjp on CPU: the last-axis kernel, rows of C contiguous elements in interleaved groups.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      rows: product of x's extents before the axis (I = 1 here)
//   C_pad  C rounded up to L
//   L      f32 lanes of the Highway target (16 on AVX-512, 8 on AVX2, 1 scalar)
//
// The op is memory-bound (about 15 flops per 6 bytes of bf16 traffic), so each row of x and dout
// is read from memory once (pass 1), and the passes that need the row's reductions re-read it
// from L1 (a group of kRows rows of bf16 with C = 128 is 2 KiB): pass 1 sums x and g = dout * s
// (RMSNorm: x^2 and g * x, all it needs), pass 2 (layer norm only) the centred sums of squares
// and of g * (x - mean) (two-pass statistics, as the reference: the one-pass variance cancels
// when |mean| >> sigma), pass 3 writes dx and adds the row's dout * xhat and dout to the
// thread's dscale / doffset partial sums. kRows independent rows interleave the long dependency
// chains of short rows (sum, horizontal reduction, sqrt, division). A row's partial last vector
// (C not a multiple of L) is widened from a zero-padded copy; its padded lanes have g = 0 and
// dout = 0, so only the centred sum of squares masks them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/layer_norm/vjp_cpu_tasks.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/layer_norm/vjp_cpu_kernel_last.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

#include "ops/layer_norm/cpu_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
// Internal linkage: other files define functions of the same names in the same per-target
// namespaces (tokamax::N_AVX3, ...), which the linker would otherwise merge.
namespace {

// Rows processed together: enough independent chains to hide the latency of a row's reductions,
// few enough that pass 2's 3 * kRows accumulators and constants stay in registers.
constexpr int kRows = 4;
// How many row groups ahead pass 3 prefetches x and dout. One: on Zen 4 (2 cores, bench_cpu
// last-axis cases, interleaved runs of two builds) one group ahead took 3-11% less time in
// total than four in each of five pairs, most on f32 with 64 channels (3.3-5.0 against 3.8-5.7
// ms; RMSNorm 2.4-3.5 against 3.1-4.7 ms): farther prefetches compete with the hardware
// prefetcher's streams for the core's outstanding misses (with none at all, one thread ran
// the f32 case in 4.6-4.7 ms against 6.8-7.0, but RMSNorm with 128 channels lost 20%).
constexpr int kPrefetchGroups = 1;

// A group's statistics from pass 1's per-row vector sums a0, a1: layer norm's mean and gbar
// (rstd and h come from pass 2: CentredStats); RMSNorm's rstd and h (mean and gbar zero).
template <bool kMean, int kRowsG>
HWY_INLINE void SumsStats(const VF* a0, const VF* a1, float inv_C, float eps, float* mean,
                          float* rstd, float* gbar, float* h) {
  const DF d;
  for (int k = 0; k < kRowsG; ++k) {
    const float s0 = hn::GetLane(hn::SumOfLanes(d, a0[k]));
    const float s1 = hn::GetLane(hn::SumOfLanes(d, a1[k]));
    if constexpr (kMean) {
      mean[k] = s0 * inv_C;
      gbar[k] = s1 * inv_C;
    } else {
      mean[k] = 0.0f;
      gbar[k] = 0.0f;
      rstd[k] = 1.0f / std::sqrt(s0 * inv_C + eps);
      h[k] = rstd[k] * (s1 * inv_C);  // mean(g xhat) = rstd * mean(g x)
    }
  }
}

// Layer norm's rstd and h from pass 2's centred sums a0 = sum (x - mean)^2, a1 = sum g (x - mean).
template <int kRowsG>
HWY_INLINE void CentredStats(const VF* a0, const VF* a1, float inv_C, float eps, float* rstd,
                             float* h) {
  const DF d;
  for (int k = 0; k < kRowsG; ++k) {
    rstd[k] = 1.0f / std::sqrt(hn::GetLane(hn::SumOfLanes(d, a0[k])) * inv_C + eps);
    h[k] = rstd[k] * (hn::GetLane(hn::SumOfLanes(d, a1[k])) * inv_C);
  }
}

// Pass 3's per-row constants: mean rstd, rstd, rstd h and -(rstd gbar), broadcast.
template <int kRowsG>
HWY_INLINE void OutputConstants(const float* mean, const float* rstd, const float* gbar,
                                const float* h, VF* mr, VF* r, VF* rh, VF* nrgb) {
  const DF d;
  for (int k = 0; k < kRowsG; ++k) {
    mr[k] = hn::Set(d, mean[k] * rstd[k]);
    r[k] = hn::Set(d, rstd[k]);
    rh[k] = hn::Set(d, rstd[k] * h[k]);
    nrgb[k] = hn::Set(d, -(rstd[k] * gbar[k]));
  }
}

// Calls group(rows, r, prefetch_x, prefetch_dy, prefetch_bytes) for a task's groups of kRows
// rows starting at row r, then for its last rows one at a time (rows: an integral_constant, the
// group's row count). The task's first groups are prefetched at once (their misses overlap
// instead of queueing behind each other until the stream of prefetches ahead has started); each
// group is given the rows kPrefetchGroups groups ahead that lie in the task.
template <typename T, class Group>
HWY_INLINE void ForEachRowGroup(const T* x, const T* dy, int64_t C, int64_t row_begin,
                                int64_t row_end, const Group& group) {
  const int64_t row_bytes = C * static_cast<int64_t>(sizeof(T));
  const int64_t head = std::min<int64_t>(row_end - row_begin, kPrefetchGroups * kRows);
  PrefetchRange(x + row_begin * C, head * row_bytes);
  PrefetchRange(dy + row_begin * C, head * row_bytes);
  int64_t r = row_begin;
  for (; r + kRows <= row_end; r += kRows) {
    const int64_t ahead = r + kPrefetchGroups * kRows;
    group(std::integral_constant<int, kRows>{}, r, reinterpret_cast<const char*>(x + ahead * C),
          reinterpret_cast<const char*>(dy + ahead * C),
          std::clamp<int64_t>(row_end - ahead, 0, kRows) * row_bytes);
  }
  for (; r < row_end; ++r) {
    group(std::integral_constant<int, 1>{}, r, nullptr, nullptr, int64_t{0});
  }
}

// The vector at column c of a row: whole (full = true) or the first `rest` lanes, zeros after.
template <typename T>
HWY_INLINE VF LoadRow(DF d, const T* HWY_RESTRICT row, int64_t c, bool full, size_t rest) {
  return full ? LoadWiden(d, row + c) : LoadWidenPartial(d, row + c, rest);
}

// kRowsG consecutive rows at x / dout / dx ([kRowsG, C] row-major); `s` = scale padded to C_pad;
// dscale_acc / doffset_acc [C_pad] per-thread partial sums. The next rows to prefetch start at
// `prefetch_x` / `prefetch_dy` (prefetch_bytes each; 0 past the task's end).
template <typename T, bool kMean, bool kStream, int kRowsG>
HWY_INLINE void RowGroupVjp(const T* HWY_RESTRICT x, const T* HWY_RESTRICT dy, T* HWY_RESTRICT dx,
                            int64_t C, const float* HWY_RESTRICT s, float eps,
                            float* HWY_RESTRICT dscale_acc, float* HWY_RESTRICT doffset_acc,
                            const char* prefetch_x, const char* prefetch_dy,
                            int64_t prefetch_bytes, bool native_bf16) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t C_main = C / L * L;
  const size_t rest = static_cast<size_t>(C - C_main);
  const int64_t C_end = rest != 0 ? C_main + L : C_main;
  const float inv_C = 1.0f / static_cast<float>(C);

  // Pass 1 (memory). Layer norm: sum x and sum g; RMSNorm: sum x^2 and sum g x.
  VF a0[kRowsG], a1[kRowsG];
  for (int k = 0; k < kRowsG; ++k) a0[k] = a1[k] = hn::Zero(d);
  for (int64_t c = 0; c < C_end; c += L) {
    const bool full = c < C_main;
    const VF sv = hn::LoadU(d, s + c);
    for (int k = 0; k < kRowsG; ++k) {
      const VF xv = LoadRow(d, x + k * C, c, full, rest);
      const VF g = hn::Mul(LoadRow(d, dy + k * C, c, full, rest), sv);
      if constexpr (kMean) {
        a0[k] = hn::Add(a0[k], xv);
        a1[k] = hn::Add(a1[k], g);
      } else {
        a0[k] = hn::MulAdd(xv, xv, a0[k]);
        a1[k] = hn::MulAdd(g, xv, a1[k]);
      }
    }
  }
  float mean[kRowsG], rstd[kRowsG], gbar[kRowsG], h[kRowsG];
  SumsStats<kMean, kRowsG>(a0, a1, inv_C, eps, mean, rstd, gbar, h);
  if constexpr (kMean) {
    // Pass 2 (L1): sum (x - mean)^2 and sum g (x - mean); padded lanes masked out of the first
    // (their g is zero).
    VF m[kRowsG];
    for (int k = 0; k < kRowsG; ++k) {
      m[k] = hn::Set(d, mean[k]);
      a0[k] = a1[k] = hn::Zero(d);
    }
    const auto mask = hn::FirstN(d, rest);
    for (int64_t c = 0; c < C_end; c += L) {
      const bool full = c < C_main;
      const VF sv = hn::LoadU(d, s + c);
      for (int k = 0; k < kRowsG; ++k) {
        VF dv = hn::Sub(LoadRow(d, x + k * C, c, full, rest), m[k]);
        if (!full) dv = hn::IfThenElseZero(mask, dv);
        const VF g = hn::Mul(LoadRow(d, dy + k * C, c, full, rest), sv);
        a0[k] = hn::MulAdd(dv, dv, a0[k]);
        a1[k] = hn::MulAdd(g, dv, a1[k]);
      }
    }
    CentredStats<kRowsG>(a0, a1, inv_C, eps, rstd, h);
  }
  // Pass 3 (L1 -> memory): dx = rstd * ((g - gbar) - xhat * h), rearranged into two FMAs per
  // vector, dout * (rstd s) + (-(rstd h) xhat - rstd gbar), with xhat = x rstd - mean rstd (one
  // more FMA); each product of per-row constants rounds once, a few u of terms the error model
  // counts C + 8 times (vjp_base_reference.cc). The rows' dout * xhat and dout are summed in
  // registers, then added to the thread's partial sums once per group. A line of the rows
  // kPrefetchGroups groups ahead per output vector (never a burst).
  VF mr[kRowsG], r[kRowsG], rh[kRowsG], nrgb[kRowsG];
  OutputConstants<kRowsG>(mean, rstd, gbar, h, mr, r, rh, nrgb);
  int64_t prefetched = 0;
  for (int64_t c = 0; c < C_end; c += L) {
    const bool full = c < C_main;
    if (prefetched < prefetch_bytes) {
      hwy::Prefetch(prefetch_x + prefetched);
      hwy::Prefetch(prefetch_dy + prefetched);
      prefetched += 64;
    }
    const VF sv = hn::LoadU(d, s + c);
    VF ds = hn::Zero(d), db = hn::Zero(d);
    for (int k = 0; k < kRowsG; ++k) {
      const VF dyv = LoadRow(d, dy + k * C, c, full, rest);
      const VF xhat = hn::MulSub(LoadRow(d, x + k * C, c, full, rest), r[k], mr[k]);
      const VF out = hn::MulAdd(dyv, hn::Mul(r[k], sv), hn::NegMulAdd(xhat, rh[k], nrgb[k]));
      if (full) {
        StoreNarrow<T, kStream>(d, out, dx + k * C + c, native_bf16);
      } else {
        StoreNarrowPartial(d, out, dx + k * C + c, rest);
      }
      ds = hn::MulAdd(dyv, xhat, ds);
      db = hn::Add(db, dyv);
    }
    hn::StoreU(hn::Add(hn::LoadU(d, dscale_acc + c), ds), d, dscale_acc + c);
    hn::StoreU(hn::Add(hn::LoadU(d, doffset_acc + c), db), d, doffset_acc + c);
  }
  if (prefetched < prefetch_bytes) {
    PrefetchRange(prefetch_x + prefetched, prefetch_bytes - prefetched);
    PrefetchRange(prefetch_dy + prefetched, prefetch_bytes - prefetched);
  }
}

// RowGroupVjp for bf16 rows whose C is a multiple of 2L: the same three passes over pairs of
// vectors (LoadWidenPair, StorePairBf16; pair order, which the row sums ignore). `s_p` is the
// scale and dscale_p / doffset_p the partial sums, all in pair order ([C] each). On AVX2 the
// bf16 kernel is bound by its ALU work, not by memory (a 2048 x 128 problem that stays in L2
// runs at the same elements per second as a 147456 x 128 one): this path widens with two
// operations per 2L elements instead of four, and recombines the rounded outputs with one
// blend instead of a pack and a cross-lane permute per L.
template <bool kMean, bool kStream, int kRowsG>
HWY_INLINE void RowGroupVjpPairs(const bf16* HWY_RESTRICT x, const bf16* HWY_RESTRICT dy,
                                 bf16* HWY_RESTRICT dx, int64_t C, const float* HWY_RESTRICT s_p,
                                 float eps, float* HWY_RESTRICT dscale_p,
                                 float* HWY_RESTRICT doffset_p, const char* prefetch_x,
                                 const char* prefetch_dy, int64_t prefetch_bytes,
                                 bool native_bf16) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t P = 2 * L;
  const float inv_C = 1.0f / static_cast<float>(C);

  // Pass 1 (memory). Layer norm: sum x and sum g; RMSNorm: sum x^2 and sum g x.
  VF a0[kRowsG], a1[kRowsG];
  for (int k = 0; k < kRowsG; ++k) a0[k] = a1[k] = hn::Zero(d);
  for (int64_t c = 0; c < C; c += P) {
    const VF se = hn::LoadU(d, s_p + c), so = hn::LoadU(d, s_p + c + L);
    for (int k = 0; k < kRowsG; ++k) {
      VF xe, xo, ye, yo;
      LoadWidenPair(x + k * C + c, xe, xo);
      LoadWidenPair(dy + k * C + c, ye, yo);
      const VF ge = hn::Mul(ye, se), go = hn::Mul(yo, so);
      if constexpr (kMean) {
        a0[k] = hn::Add(a0[k], hn::Add(xe, xo));
        a1[k] = hn::Add(a1[k], hn::Add(ge, go));
      } else {
        a0[k] = hn::MulAdd(xo, xo, hn::MulAdd(xe, xe, a0[k]));
        a1[k] = hn::MulAdd(go, xo, hn::MulAdd(ge, xe, a1[k]));
      }
    }
  }
  float mean[kRowsG], rstd[kRowsG], gbar[kRowsG], h[kRowsG];
  SumsStats<kMean, kRowsG>(a0, a1, inv_C, eps, mean, rstd, gbar, h);
  if constexpr (kMean) {
    // Pass 2 (L1): sum (x - mean)^2 and sum g (x - mean).
    VF m[kRowsG];
    for (int k = 0; k < kRowsG; ++k) {
      m[k] = hn::Set(d, mean[k]);
      a0[k] = a1[k] = hn::Zero(d);
    }
    for (int64_t c = 0; c < C; c += P) {
      const VF se = hn::LoadU(d, s_p + c), so = hn::LoadU(d, s_p + c + L);
      for (int k = 0; k < kRowsG; ++k) {
        VF xe, xo, ye, yo;
        LoadWidenPair(x + k * C + c, xe, xo);
        LoadWidenPair(dy + k * C + c, ye, yo);
        const VF de = hn::Sub(xe, m[k]), dof = hn::Sub(xo, m[k]);
        a0[k] = hn::MulAdd(dof, dof, hn::MulAdd(de, de, a0[k]));
        a1[k] = hn::MulAdd(hn::Mul(yo, so), dof, hn::MulAdd(hn::Mul(ye, se), de, a1[k]));
      }
    }
    CentredStats<kRowsG>(a0, a1, inv_C, eps, rstd, h);
  }
  // Pass 3 (L1 -> memory), RowGroupVjp's arithmetic on both vectors of a pair; a line of the rows
  // kPrefetchGroups groups ahead per row and pair.
  VF mr[kRowsG], r[kRowsG], rh[kRowsG], nrgb[kRowsG];
  OutputConstants<kRowsG>(mean, rstd, gbar, h, mr, r, rh, nrgb);
  int64_t prefetched = 0;
  for (int64_t c = 0; c < C; c += P) {
    const VF se = hn::LoadU(d, s_p + c), so = hn::LoadU(d, s_p + c + L);
    VF dse = hn::Zero(d), dso = hn::Zero(d), dbe = hn::Zero(d), dbo = hn::Zero(d);
    for (int k = 0; k < kRowsG; ++k) {
      if (prefetched < prefetch_bytes) {
        hwy::Prefetch(prefetch_x + prefetched);
        hwy::Prefetch(prefetch_dy + prefetched);
        prefetched += 64;
      }
      VF xe, xo, ye, yo;
      LoadWidenPair(x + k * C + c, xe, xo);
      LoadWidenPair(dy + k * C + c, ye, yo);
      const VF he = hn::MulSub(xe, r[k], mr[k]), ho = hn::MulSub(xo, r[k], mr[k]);
      const VF oe = hn::MulAdd(ye, hn::Mul(r[k], se), hn::NegMulAdd(he, rh[k], nrgb[k]));
      const VF oo = hn::MulAdd(yo, hn::Mul(r[k], so), hn::NegMulAdd(ho, rh[k], nrgb[k]));
      StorePairBf16<kStream>(oe, oo, dx + k * C + c, native_bf16);
      dse = hn::MulAdd(ye, he, dse);
      dso = hn::MulAdd(yo, ho, dso);
      dbe = hn::Add(dbe, ye);
      dbo = hn::Add(dbo, yo);
    }
    hn::StoreU(hn::Add(hn::LoadU(d, dscale_p + c), dse), d, dscale_p + c);
    hn::StoreU(hn::Add(hn::LoadU(d, dscale_p + c + L), dso), d, dscale_p + c + L);
    hn::StoreU(hn::Add(hn::LoadU(d, doffset_p + c), dbe), d, doffset_p + c);
    hn::StoreU(hn::Add(hn::LoadU(d, doffset_p + c + L), dbo), d, doffset_p + c + L);
  }
  if (prefetched < prefetch_bytes) {
    PrefetchRange(prefetch_x + prefetched, prefetch_bytes - prefetched);
    PrefetchRange(prefetch_dy + prefetched, prefetch_bytes - prefetched);
  }
}

// The pair path (RowGroupVjpPairs) for a task's rows: the scale in pair order and the task's
// partial sums of dscale and doffset in pair order in `scratch` ([3, C]), the sums added to the
// thread's (memory order) at the end.
template <bool kMean, bool kStream>
void RowsVjpPairs(const LayerNormVjpTaskArgs& a, int64_t row_begin, int64_t row_end,
                  float* HWY_RESTRICT scratch, float* HWY_RESTRICT dscale_acc,
                  float* HWY_RESTRICT doffset_acc) {
  const bf16* HWY_RESTRICT x = static_cast<const bf16*>(a.x);
  const bf16* HWY_RESTRICT dy = static_cast<const bf16*>(a.dout);
  bf16* HWY_RESTRICT dx = static_cast<bf16*>(a.dx);
  const int64_t C = a.C;
  float* HWY_RESTRICT s_p = scratch;
  float* HWY_RESTRICT dscale_p = scratch + C;
  float* HWY_RESTRICT doffset_p = scratch + 2 * C;
  ToPairOrder(a.scale, C, s_p);
  std::fill(dscale_p, dscale_p + 2 * C, 0.0f);
  ForEachRowGroup(x, dy, C, row_begin, row_end,
                  [&](auto rows, int64_t r, const char* px, const char* pdy, int64_t bytes) {
                    RowGroupVjpPairs<kMean, kStream, decltype(rows)::value>(
                        x + r * C, dy + r * C, dx + r * C, C, s_p, a.eps, dscale_p, doffset_p,
                        px, pdy, bytes, a.native_bf16);
                  });
  AddFromPairOrder(dscale_p, C, dscale_acc);
  AddFromPairOrder(doffset_p, C, doffset_acc);
  if constexpr (kStream) hwy::FlushStream();
}

template <typename T, bool kMean, bool kStream>
void RowsVjp(const LayerNormVjpTaskArgs& a, int64_t row_begin, int64_t row_end,
             float* HWY_RESTRICT scratch, float* HWY_RESTRICT dscale_acc,
             float* HWY_RESTRICT doffset_acc) {
  if constexpr (std::is_same_v<T, bf16> && kHasPairPath) {
    if (a.C % (2 * static_cast<int64_t>(hn::Lanes(DF()))) == 0) {
      return RowsVjpPairs<kMean, kStream>(a, row_begin, row_end, scratch, dscale_acc,
                                          doffset_acc);
    }
  }
  const T* HWY_RESTRICT x = static_cast<const T*>(a.x);
  const T* HWY_RESTRICT dy = static_cast<const T*>(a.dout);
  T* HWY_RESTRICT dx = static_cast<T*>(a.dx);
  const int64_t C = a.C;
  ForEachRowGroup(x, dy, C, row_begin, row_end,
                  [&](auto rows, int64_t r, const char* px, const char* pdy, int64_t bytes) {
                    RowGroupVjp<T, kMean, kStream, decltype(rows)::value>(
                        x + r * C, dy + r * C, dx + r * C, C, a.scale, a.eps, dscale_acc,
                        doffset_acc, px, pdy, bytes, a.native_bf16);
                  });
  // Non-temporal stores are weakly ordered: drain them (sfence) on the thread that issued them
  // before the loop reports the task done.
  if constexpr (kStream) hwy::FlushStream();
}

void LastAxisVjpTask(const LayerNormVjpTaskArgs& a, int64_t row_begin, int64_t row_end,
                     float* scratch, float* dscale_acc, float* doffset_acc) {
  DispatchType(a.dtype, a.subtract_mean, a.stream, [&](auto type, auto mode, auto streaming) {
    RowsVjp<decltype(type), decltype(mode)::value, decltype(streaming)::value>(
        a, row_begin, row_end, scratch, dscale_acc, doffset_acc);
  });
}

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {
namespace {
HWY_EXPORT(LastAxisVjpTask);
}  // namespace

void layer_norm_vjp_last_axis_task(const LayerNormVjpTaskArgs& args, int64_t row_begin,
                                   int64_t row_end, float* scratch, float* dscale_acc,
                                   float* doffset_acc) {
  HWY_DYNAMIC_DISPATCH(LastAxisVjpTask)
  (args, row_begin, row_end, scratch, dscale_acc, doffset_acc);
}

}  // namespace tokamax
#endif  // HWY_ONCE
