// layer_norm_vjp on CPU: the last-axis kernel, rows of C contiguous elements in interleaved groups.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      rows: product of x's extents before the axis (I = 1 here)
//   C_pad  C rounded up to L
//   L      f32 lanes of the Highway target (16 on AVX-512, 8 on AVX2, 1 scalar)
//
// The op is memory-bound in f32 and close to its ALU bound in bf16 (about 15 flops per 6 bytes
// of traffic), so each row of x and dout is read from memory once (pass 1), and the passes that
// need the row's reductions re-read it from L1 (a group of kRows rows of f32 with C = 128 is
// 2 KiB): pass 1 sums x and g = dout * s (RMSNorm: x^2 and g * x, all it needs), pass 2 (layer
// norm only) the centred sums of squares and of g * (x - mean) (two-pass statistics, as the
// reference: the one-pass variance cancels when |mean| >> sigma), pass 3 writes dx and adds the
// row's dout * xhat and dout to the thread's dscale / doffset partial sums. Groups of kRows rows
// are software-pipelined (GroupedRows): pass 1 of the next group runs inside pass 3 of this
// one, so a group's latency chain (sums, horizontal reductions, square root, division, pass 2)
// overlaps with the next group's loads. A row's partial last vector (C not a multiple of L) is
// widened from a zero-padded copy; its padded lanes have g = 0 and dout = 0, so only the
// centred sum of squares masks them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/layer_norm/vjp/cpu_tasks.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/layer_norm/vjp/cpu_kernel_last.cc"
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
// few enough that the accumulators and per-row constants of the fused output loop stay (mostly)
// in registers.
constexpr int kRows = 4;

// Vector access to one row, a step of kV vectors (kV * L elements) at a time. PlainRows: f32,
// bf16 or f16 widened one vector at a time, the last step partial when L does not divide C.
template <typename T>
struct PlainRows {
  using Elem = T;
  static constexpr int kV = 1;
  static constexpr bool kPipelined = true;  // GroupedRows
  static HWY_INLINE void Load(const T* HWY_RESTRICT row, int64_t c, bool full, size_t rest, VF* v) {
    v[0] = full ? LoadWiden(DF(), row + c) : LoadWidenPartial(DF(), row + c, rest);
  }
  template <bool kStream>
  static HWY_INLINE void Store(const VF* v, T* HWY_RESTRICT row, int64_t c, bool full, size_t rest,
                               bool native_bf16) {
    if (full) {
      StoreNarrow<T, kStream>(DF(), v[0], row + c, native_bf16);
    } else {
      StoreNarrowPartial(DF(), v[0], row + c, rest);
    }
  }
};

// PairRows: bf16 rows whose C is a multiple of 2L, widened and rounded back in pairs of vectors
// (LoadWidenPair, StorePairBf16: pair order, which the row sums ignore; the per-column arrays
// are in pair order too). On AVX2 the bf16 kernel is bound by its ALU work, not by memory: this
// path widens with two operations per 2L elements instead of four, and recombines the rounded
// outputs with one blend instead of a pack and a cross-lane permute per L.
struct PairRows {
  using Elem = bf16;
  static constexpr int kV = 2;
  // Not pipelined: the fused loop's two groups of pairs take more vector registers than there are
  // (the widened words go through the stack), so pipelined pairs run slower than these passes
  // one after the other (measured: docs/measurement_log.md, "layer_norm_vjp bf16 pairs").
  static constexpr bool kPipelined = false;
  static HWY_INLINE void Load(const bf16* HWY_RESTRICT row, int64_t c, bool, size_t, VF* v) {
    LoadWidenPair(row + c, v[0], v[1]);
  }
  template <bool kStream>
  static HWY_INLINE void Store(const VF* v, bf16* HWY_RESTRICT row, int64_t c, bool, size_t,
                               bool native_bf16) {
    StorePairBf16<kStream>(v[0], v[1], row + c, native_bf16);
  }
};

// A row's steps: [0, C_main) whole, then one partial step of `rest` lanes when rest != 0.
struct RowSteps {
  int64_t C = 0, step = 0, C_main = 0, C_end = 0;
  size_t rest = 0;
  template <class A>
  static RowSteps For(int64_t C) {
    RowSteps r;
    r.C = C;
    r.step = A::kV * static_cast<int64_t>(hn::Lanes(DF()));
    r.C_main = C / r.step * r.step;
    r.rest = static_cast<size_t>(C - r.C_main);
    r.C_end = r.rest != 0 ? r.C_main + r.step : r.C_main;
    return r;
  }
  int64_t steps() const { return C_end / step; }
};

// Pass 1's sums of one step of a row: layer norm sum x and sum g (g = dout * scale); RMSNorm
// sum x^2 and sum g x (all it needs).
template <bool kMean, int kV>
HWY_INLINE void AddSums(const VF* xv, const VF* yv, const VF* sv, VF& a0, VF& a1) {
  for (int i = 0; i < kV; ++i) {
    const VF g = hn::Mul(yv[i], sv[i]);
    if constexpr (kMean) {
      a0 = hn::Add(a0, xv[i]);
      a1 = hn::Add(a1, g);
    } else {
      a0 = hn::MulAdd(xv[i], xv[i], a0);
      a1 = hn::MulAdd(g, xv[i], a1);
    }
  }
}

// Each pass below is a loop over a range of whole steps (kFull) or over the partial last step,
// its accumulators in local arrays: a runtime `full` flag in the loop costs f32 rows with C = 128
// in L2 a third of their speed (its loads and stores branch), and stores through float pointers
// may alias vectors (__m512 is may_alias), so accumulating through a pointer (or a lambda's
// capture) stores the accumulators to the stack at every step.

// The steps [c0, c1) of the kRowsG rows at x / dy: term(whole, k, x, dout, scale, u, v) adds row
// k's terms of one step (kV vectors each; whole: std::bool_constant<kFull>) to u and v, which
// start as a0[k] / a1[k] and are stored back at the end.
template <class A, int kRowsG, bool kFull, class Term>
HWY_INLINE void SumRange(const typename A::Elem* HWY_RESTRICT x,
                         const typename A::Elem* HWY_RESTRICT dy, const RowSteps& rs,
                         const float* HWY_RESTRICT s, int64_t c0, int64_t c1, VF* a0, VF* a1,
                         const Term& term) {
  const DF d;
  VF l0[kRowsG], l1[kRowsG];
  for (int k = 0; k < kRowsG; ++k) {
    l0[k] = a0[k];
    l1[k] = a1[k];
  }
  for (int64_t c = c0; c < c1; c += rs.step) {
    VF sv[A::kV];
    for (int i = 0; i < A::kV; ++i) sv[i] = hn::LoadU(d, s + c + i * hn::Lanes(d));
    for (int k = 0; k < kRowsG; ++k) {
      VF xv[A::kV], yv[A::kV];
      A::Load(x + k * rs.C, c, kFull, rs.rest, xv);
      A::Load(dy + k * rs.C, c, kFull, rs.rest, yv);
      term(std::bool_constant<kFull>{}, k, xv, yv, sv, l0[k], l1[k]);
    }
  }
  for (int k = 0; k < kRowsG; ++k) {
    a0[k] = l0[k];
    a1[k] = l1[k];
  }
}

// SumRange over a row's whole steps, then its partial step; a0 / a1 start at zero.
template <class A, int kRowsG, class Term>
HWY_INLINE void SumRow(const typename A::Elem* HWY_RESTRICT x,
                       const typename A::Elem* HWY_RESTRICT dy, const RowSteps& rs,
                       const float* HWY_RESTRICT s, VF* a0, VF* a1, const Term& term) {
  for (int k = 0; k < kRowsG; ++k) a0[k] = a1[k] = hn::Zero(DF());
  SumRange<A, kRowsG, true>(x, dy, rs, s, 0, rs.C_main, a0, a1, term);
  if (rs.rest != 0) SumRange<A, kRowsG, false>(x, dy, rs, s, rs.C_main, rs.C_end, a0, a1, term);
}

// Pass 1 of the kRowsG rows at x / dy (memory): their sums in a0 / a1.
template <class A, bool kMean, int kRowsG>
HWY_INLINE void GroupSums(const typename A::Elem* HWY_RESTRICT x,
                          const typename A::Elem* HWY_RESTRICT dy, const RowSteps& rs,
                          const float* HWY_RESTRICT s, VF* a0, VF* a1) {
  SumRow<A, kRowsG>(x, dy, rs, s, a0, a1,
                    [](auto, int, const VF* xv, const VF* yv, const VF* sv, VF& u, VF& v)
                        HWY_ATTR { AddSums<kMean, A::kV>(xv, yv, sv, u, v); });
}

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

// Pass 3's per-row constants, broadcast: mean rstd, rstd, rstd h and -(rstd gbar).
template <int kRowsG>
struct OutputConstants {
  VF mr[kRowsG], r[kRowsG], rh[kRowsG], nrgb[kRowsG];
};

// The rows' output constants from pass 1's sums a0, a1 of the group at x / dy; layer norm
// first takes pass 2 (L1).
template <class A, bool kMean, int kRowsG>
HWY_INLINE OutputConstants<kRowsG> GroupConstants(const typename A::Elem* HWY_RESTRICT x,
                                                  const typename A::Elem* HWY_RESTRICT dy,
                                                  const RowSteps& rs, const float* HWY_RESTRICT s,
                                                  float eps, VF* a0, VF* a1) {
  const DF d;
  const float inv_C = 1.0f / static_cast<float>(rs.C);
  float mean[kRowsG], rstd[kRowsG], gbar[kRowsG], h[kRowsG];
  SumsStats<kMean, kRowsG>(a0, a1, inv_C, eps, mean, rstd, gbar, h);
  if constexpr (kMean) {
    VF m[kRowsG];
    for (int k = 0; k < kRowsG; ++k) m[k] = hn::Set(d, mean[k]);
    // Pass 2 (L1): sum (x - mean)^2 and sum g (x - mean), the partial step's padded lanes masked
    // out of the first (their g is zero).
    const auto mask = hn::FirstN(d, rs.rest);
    SumRow<A, kRowsG>(x, dy, rs, s, a0, a1,
                      [&](auto whole, int k, const VF* xv, const VF* yv, const VF* sv, VF& u, VF& v)
                          HWY_ATTR {
                            for (int i = 0; i < A::kV; ++i) {
                              VF dv = hn::Sub(xv[i], m[k]);
                              if constexpr (!decltype(whole)::value)
                                dv = hn::IfThenElseZero(mask, dv);
                              u = hn::MulAdd(dv, dv, u);
                              v = hn::MulAdd(hn::Mul(yv[i], sv[i]), dv, v);
                            }
                          });
    CentredStats<kRowsG>(a0, a1, inv_C, eps, rstd, h);
  }
  OutputConstants<kRowsG> oc;
  for (int k = 0; k < kRowsG; ++k) {
    oc.mr[k] = hn::Set(d, mean[k] * rstd[k]);
    oc.r[k] = hn::Set(d, rstd[k]);
    oc.rh[k] = hn::Set(d, rstd[k] * h[k]);
    oc.nrgb[k] = hn::Set(d, -(rstd[k] * gbar[k]));
  }
  return oc;
}

// Software prefetch of the rows a fixed distance ahead of the group being read from memory,
// spread over the output steps of the group before it (a burst of prefetches stalls the loop
// once the core's miss buffers are full). f32 rows are memory-bound: kAheadBytes of each of x
// and dout ahead, into L2 (the L1 prefetcher streams them on), which comes closer to a plain
// streaming loop's bandwidth than one group ahead into L1 with the rest in a burst; 4 or 16 KiB
// are no better (measured: docs/measurement_log.md, "layer_norm_vjp spread prefetch"). bf16 and
// f16 rows are bound by their ALU work, so their next group is enough, into L1.
template <typename T>
struct SpreadPrefetch {
  static constexpr int64_t kAheadBytes = sizeof(T) == 4 ? 8192 : 0;
  const char* x = nullptr;
  const char* dy = nullptr;
  int64_t bytes = 0, done = 0, per_step = 0;

  // The rows [ahead, ahead + rows) clamped to the task's end, spread over `steps` steps.
  HWY_INLINE void Aim(const T* x_rows, const T* dy_rows, int64_t C, int64_t ahead, int64_t rows,
                      int64_t row_end, int64_t steps) {
    const int64_t n = std::clamp<int64_t>(row_end - ahead, 0, rows);
    x = reinterpret_cast<const char*>(x_rows + ahead * C);
    dy = reinterpret_cast<const char*>(dy_rows + ahead * C);
    bytes = n * C * static_cast<int64_t>(sizeof(T));
    done = 0;
    per_step = (bytes / 64 + steps) / steps;
  }
  HWY_INLINE void Step() {
    for (int64_t q = 0; q < per_step && done < bytes; ++q, done += 64) {
      if constexpr (kAheadBytes > 0) {
        PrefetchL2(x + done);
        PrefetchL2(dy + done);
      } else {
        hwy::Prefetch(x + done);  // into L1 (x86: T0)
        hwy::Prefetch(dy + done);
      }
    }
  }
};

// Pass 3 of the steps [c0, c1) of the group at x / dy / dx (L1 -> memory), fused with pass 1 of
// the next group at next_x / next_dy when kNext (memory: its sums added to n0 / n1). dx = rstd *
// ((g - gbar) - xhat * h), rearranged into two FMAs per vector, dout * (rstd s) + (-(rstd h) xhat
// - rstd gbar), with xhat = x rstd - mean rstd (one more FMA); each product of per-row constants
// rounds once, a few u of terms the error model counts C + 8 times (base_numerics.cc). The
// rows' dout * xhat and dout are summed in registers, then added to the partial sums once per
// step.
template <class A, bool kMean, bool kStream, int kRowsG, bool kNext, bool kFull>
HWY_INLINE void OutputRange(const typename A::Elem* HWY_RESTRICT x,
                            const typename A::Elem* HWY_RESTRICT dy,
                            typename A::Elem* HWY_RESTRICT dx, const RowSteps& rs,
                            const float* HWY_RESTRICT s, const OutputConstants<kRowsG>& oc,
                            float* HWY_RESTRICT dscale_acc, float* HWY_RESTRICT doffset_acc,
                            const typename A::Elem* HWY_RESTRICT next_x,
                            const typename A::Elem* HWY_RESTRICT next_dy, int64_t c0, int64_t c1,
                            VF* n0, VF* n1, SpreadPrefetch<typename A::Elem>& prefetch,
                            bool native_bf16) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const OutputConstants<kRowsG> k_oc = oc;
  SpreadPrefetch<typename A::Elem> pf = prefetch;
  VF l0[kRowsG], l1[kRowsG];
  for (int k = 0; k < kRowsG; ++k) {
    l0[k] = n0[k];
    l1[k] = n1[k];
  }
  for (int64_t c = c0; c < c1; c += rs.step) {
    pf.Step();
    VF sv[A::kV];
    for (int i = 0; i < A::kV; ++i) sv[i] = hn::LoadU(d, s + c + i * L);
    if constexpr (kNext) {
      for (int k = 0; k < kRowsG; ++k) {
        VF xv[A::kV], yv[A::kV];
        A::Load(next_x + k * rs.C, c, kFull, rs.rest, xv);
        A::Load(next_dy + k * rs.C, c, kFull, rs.rest, yv);
        AddSums<kMean, A::kV>(xv, yv, sv, l0[k], l1[k]);
      }
    }
    VF ds[A::kV], db[A::kV];
    for (int i = 0; i < A::kV; ++i) ds[i] = db[i] = hn::Zero(d);
    for (int k = 0; k < kRowsG; ++k) {
      VF xv[A::kV], yv[A::kV], out[A::kV];
      A::Load(x + k * rs.C, c, kFull, rs.rest, xv);
      A::Load(dy + k * rs.C, c, kFull, rs.rest, yv);
      for (int i = 0; i < A::kV; ++i) {
        VF xhat;
        if constexpr (kMean) {
          xhat = hn::MulSub(xv[i], k_oc.r[k], k_oc.mr[k]);
          out[i] = hn::MulAdd(yv[i], hn::Mul(k_oc.r[k], sv[i]),
                              hn::NegMulAdd(xhat, k_oc.rh[k], k_oc.nrgb[k]));
        } else {  // RMSNorm: mean and gbar are zero
          xhat = hn::Mul(xv[i], k_oc.r[k]);
          out[i] = hn::NegMulAdd(xhat, k_oc.rh[k], hn::Mul(yv[i], hn::Mul(k_oc.r[k], sv[i])));
        }
        ds[i] = hn::MulAdd(yv[i], xhat, ds[i]);
        db[i] = hn::Add(db[i], yv[i]);
      }
      A::template Store<kStream>(out, dx + k * rs.C, c, kFull, rs.rest, native_bf16);
    }
    for (int i = 0; i < A::kV; ++i) {
      float* HWY_RESTRICT ds_c = dscale_acc + c + i * L;
      float* HWY_RESTRICT db_c = doffset_acc + c + i * L;
      hn::StoreU(hn::Add(hn::LoadU(d, ds_c), ds[i]), d, ds_c);
      hn::StoreU(hn::Add(hn::LoadU(d, db_c), db[i]), d, db_c);
    }
  }
  for (int k = 0; k < kRowsG; ++k) {
    n0[k] = l0[k];
    n1[k] = l1[k];
  }
  prefetch = pf;
}

// Pass 3 of the group at x / dy / dx, fused with pass 1 of the next group (its sums in a0 / a1)
// when kNext.
template <class A, bool kMean, bool kStream, int kRowsG, bool kNext>
HWY_INLINE void GroupOutputs(const typename A::Elem* HWY_RESTRICT x,
                             const typename A::Elem* HWY_RESTRICT dy,
                             typename A::Elem* HWY_RESTRICT dx, const RowSteps& rs,
                             const float* HWY_RESTRICT s, const OutputConstants<kRowsG>& oc,
                             float* HWY_RESTRICT dscale_acc, float* HWY_RESTRICT doffset_acc,
                             const typename A::Elem* HWY_RESTRICT next_x,
                             const typename A::Elem* HWY_RESTRICT next_dy, VF* a0, VF* a1,
                             SpreadPrefetch<typename A::Elem>& prefetch, bool native_bf16) {
  for (int k = 0; k < kRowsG; ++k) a0[k] = a1[k] = hn::Zero(DF());
  OutputRange<A, kMean, kStream, kRowsG, kNext, true>(x, dy, dx, rs, s, oc, dscale_acc, doffset_acc,
                                                      next_x, next_dy, 0, rs.C_main, a0, a1,
                                                      prefetch, native_bf16);
  if (rs.rest != 0) {
    OutputRange<A, kMean, kStream, kRowsG, kNext, false>(x, dy, dx, rs, s, oc, dscale_acc,
                                                         doffset_acc, next_x, next_dy, rs.C_main,
                                                         rs.C_end, a0, a1, prefetch, native_bf16);
  }
}

// Rows [row_begin, row_end) of x / dy / dx ([rows, C] row-major) in groups of kRowsG; with
// A::kPipelined, software-pipelined: each group's output pass also reads the next group from
// memory and sums it (pass 1), so the loads and stores of two groups interleave with the latency
// chain between a group's sums and its outputs (horizontal sums, square root, division, pass 2
// from L1) instead of waiting on it (measured: docs/measurement_log.md, "layer_norm_vjp
// pipelined row groups"). `s` = scale padded to C_pad, dscale_acc / doffset_acc [C_pad] partial
// sums (pair order for PairRows).
template <class A, bool kMean, bool kStream, int kRowsG>
HWY_INLINE void GroupedRows(const typename A::Elem* HWY_RESTRICT x,
                            const typename A::Elem* HWY_RESTRICT dy,
                            typename A::Elem* HWY_RESTRICT dx, const RowSteps& rs,
                            int64_t row_begin, int64_t row_end, const float* HWY_RESTRICT s,
                            float eps, float* HWY_RESTRICT dscale_acc,
                            float* HWY_RESTRICT doffset_acc, bool native_bf16) {
  using T = typename A::Elem;
  const int64_t C = rs.C;
  const int64_t groups = (row_end - row_begin) / kRowsG;
  if (groups == 0) return;
  const int64_t group_bytes = kRowsG * C * static_cast<int64_t>(sizeof(T));
  const int64_t ahead_groups = std::max<int64_t>(1, SpreadPrefetch<T>::kAheadBytes / group_bytes);
  // The first groups at once: their misses overlap instead of queueing behind each other until
  // the spread prefetches have started.
  const int64_t head = std::min(groups, ahead_groups + 1) * group_bytes;
  PrefetchRange(x + row_begin * C, head);
  PrefetchRange(dy + row_begin * C, head);
  SpreadPrefetch<T> prefetch;
  constexpr bool kPipelined = A::kPipelined;
  // Pass 1's sums of the group being processed: pipelined, the first group's here and each
  // next group's from the output pass before it.
  VF a0[kRowsG], a1[kRowsG];
  if constexpr (kPipelined) {
    GroupSums<A, kMean, kRowsG>(x + row_begin * C, dy + row_begin * C, rs, s, a0, a1);
  }
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t r = row_begin + g * kRowsG;
    if constexpr (!kPipelined) {
      GroupSums<A, kMean, kRowsG>(x + r * C, dy + r * C, rs, s, a0, a1);
    }
    const OutputConstants<kRowsG> oc =
        GroupConstants<A, kMean, kRowsG>(x + r * C, dy + r * C, rs, s, eps, a0, a1);
    prefetch.Aim(x, dy, C, r + (ahead_groups + kPipelined) * kRowsG, kRowsG, row_end, rs.steps());
    const T* next_x = x + (r + kRowsG) * C;
    const T* next_dy = dy + (r + kRowsG) * C;
    if (kPipelined && g + 1 < groups) {
      GroupOutputs<A, kMean, kStream, kRowsG, true>(x + r * C, dy + r * C, dx + r * C, rs, s, oc,
                                                    dscale_acc, doffset_acc, next_x, next_dy, a0,
                                                    a1, prefetch, native_bf16);
    } else {
      GroupOutputs<A, kMean, kStream, kRowsG, false>(x + r * C, dy + r * C, dx + r * C, rs, s, oc,
                                                     dscale_acc, doffset_acc, next_x, next_dy, a0,
                                                     a1, prefetch, native_bf16);
    }
  }
}

// A task's rows: groups of kRows, then the last rows one at a time.
template <class A, bool kMean, bool kStream>
HWY_INLINE void TaskRows(const LayerNormVjpTaskArgs& a, int64_t row_begin, int64_t row_end,
                         const float* HWY_RESTRICT s, float* HWY_RESTRICT dscale_acc,
                         float* HWY_RESTRICT doffset_acc) {
  using T = typename A::Elem;
  const T* HWY_RESTRICT x = static_cast<const T*>(a.x);
  const T* HWY_RESTRICT dy = static_cast<const T*>(a.dout);
  T* HWY_RESTRICT dx = static_cast<T*>(a.dx);
  const RowSteps rs = RowSteps::For<A>(a.C);
  const int64_t split = row_begin + (row_end - row_begin) / kRows * kRows;
  GroupedRows<A, kMean, kStream, kRows>(x, dy, dx, rs, row_begin, split, s, a.eps, dscale_acc,
                                        doffset_acc, a.native_bf16);
  GroupedRows<A, kMean, kStream, 1>(x, dy, dx, rs, split, row_end, s, a.eps, dscale_acc,
                                    doffset_acc, a.native_bf16);
  // Non-temporal stores are weakly ordered: drain them (sfence) on the thread that issued them
  // before the loop reports the task done.
  if constexpr (kStream) hwy::FlushStream();
}

template <typename T, bool kMean, bool kStream>
void RowsVjp(const LayerNormVjpTaskArgs& a, int64_t row_begin, int64_t row_end,
             float* HWY_RESTRICT scratch, float* HWY_RESTRICT dscale_acc,
             float* HWY_RESTRICT doffset_acc) {
  if constexpr (std::is_same_v<T, bf16> && kHasPairPath) {
    const int64_t C = a.C;
    if (C % (2 * static_cast<int64_t>(hn::Lanes(DF()))) == 0) {
      // The scale and the task's partial sums in pair order in `scratch` ([3, C]), the sums
      // added to the thread's (memory order) at the end.
      float* HWY_RESTRICT s_p = scratch;
      float* HWY_RESTRICT dscale_p = scratch + C;
      float* HWY_RESTRICT doffset_p = scratch + 2 * C;
      ToPairOrder(a.scale, C, s_p);
      std::fill(dscale_p, dscale_p + 2 * C, 0.0f);
      TaskRows<PairRows, kMean, kStream>(a, row_begin, row_end, s_p, dscale_p, doffset_p);
      AddFromPairOrder(dscale_p, C, dscale_acc);
      AddFromPairOrder(doffset_p, C, doffset_acc);
      return;
    }
  }
  TaskRows<PlainRows<T>, kMean, kStream>(a, row_begin, row_end, a.scale, dscale_acc, doffset_acc);
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
