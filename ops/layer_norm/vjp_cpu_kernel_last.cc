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
// How many row groups ahead pass 3 prefetches x and dout.
constexpr int kPrefetchGroups = 4;

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
    for (int k = 0; k < kRowsG; ++k) {
      rstd[k] = 1.0f / std::sqrt(hn::GetLane(hn::SumOfLanes(d, a0[k])) * inv_C + eps);
      h[k] = rstd[k] * (hn::GetLane(hn::SumOfLanes(d, a1[k])) * inv_C);
    }
  }
  // Pass 3 (L1 -> memory): dx = rstd * ((g - gbar) - xhat * h), rearranged into two FMAs per
  // vector, dout * (rstd s) + (-(rstd h) xhat - rstd gbar), with xhat = x rstd - mean rstd (one
  // more FMA); each product of per-row constants rounds once, a few u of terms the error model
  // counts C + 8 times (vjp_base_reference.cc). The rows' dout * xhat and dout are summed in
  // registers, then added to the thread's partial sums once per group. A line of the rows
  // kPrefetchGroups groups ahead per output vector (never a burst).
  VF mr[kRowsG], r[kRowsG], rh[kRowsG], nrgb[kRowsG];
  for (int k = 0; k < kRowsG; ++k) {
    mr[k] = hn::Set(d, mean[k] * rstd[k]);
    r[k] = hn::Set(d, rstd[k]);
    rh[k] = hn::Set(d, rstd[k] * h[k]);
    nrgb[k] = hn::Set(d, -(rstd[k] * gbar[k]));
  }
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

template <typename T, bool kMean, bool kStream>
void RowsVjp(const LayerNormVjpTaskArgs& a, int64_t row_begin, int64_t row_end,
             float* HWY_RESTRICT dscale_acc, float* HWY_RESTRICT doffset_acc) {
  const T* HWY_RESTRICT x = static_cast<const T*>(a.x);
  const T* HWY_RESTRICT dy = static_cast<const T*>(a.dout);
  T* HWY_RESTRICT dx = static_cast<T*>(a.dx);
  const int64_t C = a.C;
  const int64_t row_bytes = C * static_cast<int64_t>(sizeof(T));
  // The task's first groups at once: their misses overlap instead of queueing behind each other
  // until the stream of prefetches ahead has started.
  const int64_t head = std::min<int64_t>(row_end - row_begin, kPrefetchGroups * kRows);
  PrefetchRange(x + row_begin * C, head * row_bytes);
  PrefetchRange(dy + row_begin * C, head * row_bytes);
  // Bytes of the rows kPrefetchGroups groups past r that lie in the task.
  auto ahead = [&](int64_t r, int64_t rows) {
    return std::clamp<int64_t>(row_end - (r + kPrefetchGroups * rows), 0, rows) * row_bytes;
  };
  int64_t r = row_begin;
  for (; r + kRows <= row_end; r += kRows) {
    const int64_t p = (r + kPrefetchGroups * kRows) * C;
    RowGroupVjp<T, kMean, kStream, kRows>(
        x + r * C, dy + r * C, dx + r * C, C, a.scale, a.eps, dscale_acc, doffset_acc,
        reinterpret_cast<const char*>(x + p), reinterpret_cast<const char*>(dy + p),
        ahead(r, kRows), a.native_bf16);
  }
  for (; r < row_end; ++r) {
    RowGroupVjp<T, kMean, kStream, 1>(x + r * C, dy + r * C, dx + r * C, C, a.scale, a.eps,
                                      dscale_acc, doffset_acc, nullptr, nullptr, 0,
                                      a.native_bf16);
  }
  // Non-temporal stores are weakly ordered: drain them (sfence) on the thread that issued them
  // before the loop reports the task done.
  if constexpr (kStream) hwy::FlushStream();
}

void LastAxisVjpTask(const LayerNormVjpTaskArgs& a, int64_t row_begin, int64_t row_end,
                     float* dscale_acc, float* doffset_acc) {
  DispatchType(a.dtype, a.subtract_mean, a.stream, [&](auto type, auto mode, auto streaming) {
    RowsVjp<decltype(type), decltype(mode)::value, decltype(streaming)::value>(
        a, row_begin, row_end, dscale_acc, doffset_acc);
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
                                   int64_t row_end, float* dscale_acc, float* doffset_acc) {
  HWY_DYNAMIC_DISPATCH(LastAxisVjpTask)(args, row_begin, row_end, dscale_acc, doffset_acc);
}

}  // namespace tokamax
#endif  // HWY_ONCE
