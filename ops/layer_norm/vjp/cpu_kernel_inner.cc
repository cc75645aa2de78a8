// layer_norm_vjp on CPU: the kernel for a non-last axis, blocks of contiguous inner elements.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous)
//   w      inner elements of the current block (<= tI); w_pad = w rounded up to L
//   L      f32 lanes of the Highway target (16 on AVX-512, 8 on AVX2, 1 scalar)
//
// The C elements of a row are I apart, so vectorizing along the row would gather. A block of w
// contiguous inner elements is w independent rows instead; vectors run across them and every
// reduction over C is a loop of vector adds into per-column accumulators (an f32 scratch of
// 4 * w_pad in L1), four rows at a time summed in registers first. Pass 1 reads the block of x
// and dout ([C, w] each, rows I apart) from memory and sums x and g = dout * s per column
// (RMSNorm: x^2 and g * x); pass 2 (layer norm only) re-reads the block from L2 for the centred
// sums (x - mean)^2 and g * (x - mean); pass 3 re-reads it once more and writes dx, reducing
// each row's dout * xhat and dout across the block's columns into the thread's dscale / doffset
// partial sums (one horizontal sum per row and block), while prefetching the task's next block.
// Columns past the last multiple of L are scalar.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/layer_norm/vjp/cpu_tasks.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/layer_norm/vjp/cpu_kernel_inner.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

#include "ops/layer_norm/cpu_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
// Internal linkage: other files define functions of the same names in the same per-target
// namespaces (tokamax::N_AVX3, ...), which the linker would otherwise merge.
namespace {

// How many rows of a block ahead pass 1 prefetches x and dout (the task's first block: the
// others were prefetched during the block before).
constexpr int64_t kPrefetchRows = 8;

// The task's next block (C rows of `row_bytes`, I elements apart, of x and dout), prefetched into
// L2 a quota of lines at a time from every pass over the current block: pass 1 before each
// group of rows, pass 2 likewise, pass 3 before each row. Spread so, the block's memory reads
// overlap with the passes that run from L2. Fetching the whole next block during pass 3 alone
// would leave the memory idle through passes 1 and 2 (measured: docs/measurement_log.md,
// "layer_norm_vjp axis-0 prefetch").
template <typename T>
struct BlockPrefetch {
  const char* x = nullptr;
  const char* dy = nullptr;
  int64_t row_stride = 0, lines_per_row = 0, total = 0, next = 0, quota = 0;

  BlockPrefetch(const T* next_x, const T* next_dy, int64_t C, int64_t I, int64_t next_w,
                int64_t points)
      : x(reinterpret_cast<const char*>(next_x)),
        dy(reinterpret_cast<const char*>(next_dy)),
        row_stride(I * static_cast<int64_t>(sizeof(T))),
        lines_per_row((next_w * static_cast<int64_t>(sizeof(T)) + 63) / 64),
        total(C * lines_per_row),
        quota((total + points - 1) / std::max<int64_t>(points, 1)) {}

  HWY_INLINE void Issue() {
    const int64_t end = std::min(total, next + quota);
    for (; next < end; ++next) {
      const int64_t offset = next / lines_per_row * row_stride + next % lines_per_row * 64;
      PrefetchL2(x + offset);
      PrefetchL2(dy + offset);
    }
  }
};

// The column sums of R rows (x and dout at row 0, rows I apart, scale s[0..R)) over the whole
// vectors [0, w_main), widened: bf16 in pairs of vectors over [0, w2) (the even vector at j, the
// odd one at j + L: pair order), then one vector at a time. term(x, dout, s, j, u, v) adds one
// row's terms of the columns at j to two register sums, which are added to acc_u[j] and acc_v[j]
// once per R rows. Against one row at a time this saves R - 1 of every R loads and stores of the
// accumulators (on AVX2 the stores alone took a cycle per vector and row).
template <int R, typename T, class Term>
HWY_INLINE void AddRowSums(const T* HWY_RESTRICT x, const T* HWY_RESTRICT dy, int64_t I,
                           const float* HWY_RESTRICT s, int64_t w2, int64_t w_main,
                           float* HWY_RESTRICT acc_u, float* HWY_RESTRICT acc_v, const Term& term) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  auto add = [&](VF u, VF v, int64_t j) {
    hn::StoreU(hn::Add(hn::LoadU(d, acc_u + j), u), d, acc_u + j);
    hn::StoreU(hn::Add(hn::LoadU(d, acc_v + j), v), d, acc_v + j);
  };
  int64_t j = 0;
  if constexpr (std::is_same_v<T, bf16> && kHasPairPath) {
    for (; j < w2; j += 2 * L) {
      VF ue = hn::Zero(d), uo = hn::Zero(d), ve = hn::Zero(d), vo = hn::Zero(d);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        VF xe, xo, ye, yo;
        LoadWidenPair(x + r * I + j, xe, xo);
        LoadWidenPair(dy + r * I + j, ye, yo);
        const VF sv = hn::Set(d, s[r]);
        term(xe, ye, sv, j, ue, ve);
        term(xo, yo, sv, j + L, uo, vo);
      }
      add(ue, ve, j);
      add(uo, vo, j + L);
    }
  }
  for (; j < w_main; j += L) {
    VF u = hn::Zero(d), v = hn::Zero(d);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      term(LoadWiden(d, x + r * I + j), LoadWiden(d, dy + r * I + j), hn::Set(d, s[r]), j, u, v);
    }
    add(u, v, j);
  }
}

// Rows [0, C) of a block through AddRowSums, kRowSums at a time, then the rest one by one;
// before each group, prefetch(c, rows) for its rows.
constexpr int kRowSums = 4;
template <typename T, class Term, class Prefetch>
HWY_INLINE void AddBlockSums(const T* HWY_RESTRICT x, const T* HWY_RESTRICT dy, int64_t C,
                             int64_t I, const float* HWY_RESTRICT s, int64_t w2, int64_t w_main,
                             float* HWY_RESTRICT acc_u, float* HWY_RESTRICT acc_v, const Term& term,
                             const Prefetch& prefetch) {
  int64_t c = 0;
  for (; c + kRowSums <= C; c += kRowSums) {
    prefetch(c, kRowSums);
    AddRowSums<kRowSums>(x + c * I, dy + c * I, I, s + c, w2, w_main, acc_u, acc_v, term);
  }
  for (; c < C; ++c) {
    prefetch(c, 1);
    AddRowSums<1>(x + c * I, dy + c * I, I, s + c, w2, w_main, acc_u, acc_v, term);
  }
}

// One block: x, dout, dx point at [o, 0, i0] of [O, C, I]; element (c, j) is at c * I + j.
// `stats` [4 * w_pad] f32 scratch; dscale_acc / doffset_acc [C_pad] per-thread partial sums.
// bf16 columns [0, w2) go in pairs of vectors (LoadWidenPair, StorePairBf16): their statistics
// sit in pair order in `stats`, which only this block reads, and the reductions over a row's
// columns ignore the order. On AVX2 this kernel is bound by its ALU work, like the last-axis
// one; the pairs halve the widening and most of the rounding's recombination.
template <typename T, bool kMean, bool kStream>
void BlockVjp(const LayerNormVjpTaskArgs& a, const T* HWY_RESTRICT x, const T* HWY_RESTRICT dy,
              T* HWY_RESTRICT dx, int64_t w, const T* HWY_RESTRICT next_x,
              const T* HWY_RESTRICT next_dy, int64_t next_w, float* HWY_RESTRICT stats,
              float* HWY_RESTRICT dscale_acc, float* HWY_RESTRICT doffset_acc) {
  constexpr bool kPairs = std::is_same_v<T, bf16> && kHasPairPath;
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t P = 2 * L;
  const int64_t C = a.C, I = a.I;
  const float* HWY_RESTRICT s = a.scale;
  const int64_t w2 = kPairs ? w / P * P : 0;
  const int64_t w_main = w / L * L, w_pad = (w + L - 1) / L * L;
  const float inv_C = 1.0f / static_cast<float>(C);
  // Non-temporal pair stores write 4L bytes: the launch's alignment check covers L elements only.
  const bool pair_stream =
      kStream && I % P == 0 && reinterpret_cast<uintptr_t>(dx) % (P * sizeof(T)) == 0;
  // [w_pad] each. Layer norm: sum x then the mean, sum g then gbar, sum (x - mean)^2 then rstd,
  // sum g (x - mean) then h. RMSNorm: sum x^2 then rstd (a2), sum g x then h (a3); a0, a1 zero.
  // Pass 3 reads them as its per-column constants (below).
  float* HWY_RESTRICT a0 = stats;
  float* HWY_RESTRICT a1 = stats + w_pad;
  float* HWY_RESTRICT a2 = stats + 2 * w_pad;
  float* HWY_RESTRICT a3 = stats + 3 * w_pad;
  std::memset(stats, 0, sizeof(float) * 4 * w_pad);
  const int64_t row_bytes = w * static_cast<int64_t>(sizeof(T));
  // Prefetch points: each group of pass 1 (and pass 2), each row of pass 3.
  const int64_t groups = C / kRowSums + C % kRowSums;
  BlockPrefetch<T> next(next_x, next_dy, C, I, next_w, (kMean ? 2 : 1) * groups + C);

  // Pass 1 (memory): rows of the block are contiguous runs of w elements, I apart.
  auto prefetch_ahead = [&](int64_t c, int64_t rows) {
    // The rows kPrefetchRows ahead (separate pages, separate streams), as the rows go.
    for (int64_t r = c + kPrefetchRows; r < std::min(C, c + kPrefetchRows + rows); ++r) {
      PrefetchRange(x + r * I, row_bytes);
      PrefetchRange(dy + r * I, row_bytes);
    }
    next.Issue();
  };
  if constexpr (kMean) {
    // sum x, sum g.
    AddBlockSums(
        x, dy, C, I, s, w2, w_main, a0, a1,
        [&](VF xv, VF yv, VF sv, int64_t, VF& u, VF& v) {
          u = hn::Add(u, xv);
          v = hn::MulAdd(yv, sv, v);
        },
        prefetch_ahead);
  } else {
    // sum x^2, sum g x.
    AddBlockSums(
        x, dy, C, I, s, w2, w_main, a2, a3,
        [&](VF xv, VF yv, VF sv, int64_t, VF& u, VF& v) {
          u = hn::MulAdd(xv, xv, u);
          v = hn::MulAdd(hn::Mul(yv, sv), xv, v);
        },
        prefetch_ahead);
  }
  for (int64_t c = 0; c < C; ++c) {
    const T* HWY_RESTRICT xc = x + c * I;
    const T* HWY_RESTRICT dc = dy + c * I;
    for (int64_t j = w_main; j < w; ++j) {
      const float xv = WidenScalar(xc[j]), g = WidenScalar(dc[j]) * s[c];
      if constexpr (kMean) {
        a0[j] += xv;
        a1[j] += g;
      } else {
        a2[j] = std::fma(xv, xv, a2[j]);
        a3[j] = std::fma(g, xv, a3[j]);
      }
    }
  }
  const VF k_inv_C = hn::Set(d, inv_C), k_eps = hn::Set(d, a.eps), one = hn::Set(d, 1.0f);
  if constexpr (kMean) {
    for (int64_t j = 0; j < w_pad; j += L) {
      hn::StoreU(hn::Mul(hn::LoadU(d, a0 + j), k_inv_C), d, a0 + j);
      hn::StoreU(hn::Mul(hn::LoadU(d, a1 + j), k_inv_C), d, a1 + j);
    }
    // Pass 2 (L2): the centred sums; the padding columns stay zero.
    AddBlockSums(
        x, dy, C, I, s, w2, w_main, a2, a3,
        [&](VF xv, VF yv, VF sv, int64_t j, VF& u, VF& v) {
          const VF dv = hn::Sub(xv, hn::LoadU(d, a0 + j));
          u = hn::MulAdd(dv, dv, u);
          v = hn::MulAdd(hn::Mul(yv, sv), dv, v);
        },
        [&](int64_t, int64_t) { next.Issue(); });
    for (int64_t c = 0; c < C; ++c) {
      const T* HWY_RESTRICT xc = x + c * I;
      const T* HWY_RESTRICT dc = dy + c * I;
      for (int64_t j = w_main; j < w; ++j) {
        const float dv = WidenScalar(xc[j]) - a0[j], g = WidenScalar(dc[j]) * s[c];
        a2[j] = std::fma(dv, dv, a2[j]);
        a3[j] = std::fma(g, dv, a3[j]);
      }
    }
  }
  // rstd = 1 / sqrt(sum_sq / C + eps), h = rstd * (sum g (x - mean)) / C, vectorized (std::sqrt
  // in a loop stays scalar for errno); then pass 3's per-column constants, as the last-axis
  // kernel's: a0 = -mean rstd, a1 = -rstd gbar, a2 = rstd, a3 = rstd h.
  for (int64_t j = 0; j < w_pad; j += L) {
    const VF r = hn::Div(one, hn::Sqrt(hn::MulAdd(hn::LoadU(d, a2 + j), k_inv_C, k_eps)));
    const VF h = hn::Mul(r, hn::Mul(hn::LoadU(d, a3 + j), k_inv_C));
    hn::StoreU(hn::Neg(hn::Mul(hn::LoadU(d, a0 + j), r)), d, a0 + j);
    hn::StoreU(hn::Neg(hn::Mul(r, hn::LoadU(d, a1 + j))), d, a1 + j);
    hn::StoreU(r, d, a2 + j);
    hn::StoreU(hn::Mul(r, h), d, a3 + j);
  }
  // Pass 3 (L2 -> memory), row by row (sequential write streams): dx = rstd * ((g - gbar) -
  // xhat * h) as two FMAs, dout * (rstd s) + (-(rstd h) xhat - rstd gbar), with xhat = x rstd -
  // mean rstd (one more).
  for (int64_t c = 0; c < C; ++c) {
    const T* HWY_RESTRICT xc = x + c * I;
    const T* HWY_RESTRICT dc = dy + c * I;
    T* HWY_RESTRICT oc = dx + c * I;
    const VF sv = hn::Set(d, s[c]);
    VF ds0 = hn::Zero(d), db0 = hn::Zero(d), ds1 = hn::Zero(d), db1 = hn::Zero(d);
    next.Issue();
    // dx of the columns at j; their dout * xhat and dout added to ds and db.
    auto out = [&](VF xv, VF dyv, int64_t j, VF& ds, VF& db) {
      const VF r = hn::LoadU(d, a2 + j);
      const VF xhat = hn::MulAdd(xv, r, hn::LoadU(d, a0 + j));
      ds = hn::MulAdd(dyv, xhat, ds);
      db = hn::Add(db, dyv);
      return hn::MulAdd(dyv, hn::Mul(r, sv),
                        hn::NegMulAdd(xhat, hn::LoadU(d, a3 + j), hn::LoadU(d, a1 + j)));
    };
    int64_t j = 0;
    if constexpr (kPairs) {
      for (; j < w2; j += P) {
        VF xe, xo, ye, yo;
        LoadWidenPair(xc + j, xe, xo);
        LoadWidenPair(dc + j, ye, yo);
        const VF oe = out(xe, ye, j, ds0, db0);
        const VF oo = out(xo, yo, j + L, ds1, db1);
        if (pair_stream) {
          StorePairBf16<kStream>(oe, oo, oc + j, a.native_bf16);
        } else {
          StorePairBf16<false>(oe, oo, oc + j, a.native_bf16);
        }
      }
    }
    for (; j < w_main; j += L) {
      StoreNarrow<T, kStream>(d, out(LoadWiden(d, xc + j), LoadWiden(d, dc + j), j, ds0, db0),
                              oc + j, a.native_bf16);
    }
    float ds_c = hn::GetLane(hn::SumOfLanes(d, hn::Add(ds0, ds1)));
    float db_c = hn::GetLane(hn::SumOfLanes(d, hn::Add(db0, db1)));
    for (j = w_main; j < w; ++j) {
      const float dyv = WidenScalar(dc[j]);
      const float xhat = std::fma(WidenScalar(xc[j]), a2[j], a0[j]);
      oc[j] = Narrow<T>(std::fma(dyv, a2[j] * s[c], std::fma(-xhat, a3[j], a1[j])));
      ds_c = std::fma(dyv, xhat, ds_c);
      db_c += dyv;
    }
    dscale_acc[c] += ds_c;
    doffset_acc[c] += db_c;
  }
}

void InnerAxisVjpTask(const LayerNormVjpTaskArgs& a, int64_t offset, int64_t w, int64_t next_offset,
                      int64_t next_w, float* stats, float* dscale_acc, float* doffset_acc) {
  DispatchType(a.dtype, a.subtract_mean, a.stream, [&](auto type, auto mode, auto streaming) {
    using T = decltype(type);
    const T* x = static_cast<const T*>(a.x);
    const T* dy = static_cast<const T*>(a.dout);
    BlockVjp<T, decltype(mode)::value, decltype(streaming)::value>(
        a, x + offset, dy + offset, static_cast<T*>(a.dx) + offset, w, x + next_offset,
        dy + next_offset, next_w, stats, dscale_acc, doffset_acc);
    // Non-temporal stores are weakly ordered: drain them (sfence) on this thread.
    if constexpr (decltype(streaming)::value) hwy::FlushStream();
  });
}

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {
namespace {
HWY_EXPORT(InnerAxisVjpTask);
}  // namespace

void layer_norm_vjp_inner_axis_task(const LayerNormVjpTaskArgs& args, int64_t offset_elements,
                                    int64_t w, int64_t next_offset_elements, int64_t next_w,
                                    float* stats, float* dscale_acc, float* doffset_acc) {
  HWY_DYNAMIC_DISPATCH(InnerAxisVjpTask)
  (args, offset_elements, w, next_offset_elements, next_w, stats, dscale_acc, doffset_acc);
}

}  // namespace tokamax
#endif  // HWY_ONCE
