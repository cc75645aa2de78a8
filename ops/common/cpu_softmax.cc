// Vectorized softmax pieces, compiled once per SIMD target by Highway.
#include "ops/common/cpu_softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/cpu_softmax.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "ops/common/cpu_exp-inl.h"
#include "ops/common/masked_load-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float RowMax(const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  auto m = hn::Set(d, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + L <= n; i += L) m = hn::Max(m, hn::LoadU(d, x + i));
  float result = hn::GetLane(hn::MaxOfLanes(d, m));
  for (; i < n; ++i) result = std::max(result, x[i]);
  return result;
}

float ExpShiftSum(float* x, int64_t n, float shift, float scale) {
  const hn::ScalableTag<float> d;
  if (shift == -std::numeric_limits<float>::infinity()) {
    for (int64_t i = 0; i < n; ++i) x[i] = 0.0f;
    return 0.0f;
  }
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto s = hn::Set(d, shift), a = hn::Set(d, scale);
  // Two partial sums: one add chain would bound the loop by the add latency.
  auto sum0 = hn::Zero(d), sum1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    const auto e0 = ExpNonPositive(d, hn::MulSub(hn::LoadU(d, x + i), a, s));
    const auto e1 = ExpNonPositive(d, hn::MulSub(hn::LoadU(d, x + i + L), a, s));
    hn::StoreU(e0, d, x + i);
    hn::StoreU(e1, d, x + i + L);
    sum0 = hn::Add(sum0, e0);
    sum1 = hn::Add(sum1, e1);
  }
  for (; i < n; i += L) {
    const size_t rest = static_cast<size_t>(std::min<int64_t>(L, n - i));
    const auto mask = hn::FirstN(d, rest);
    const auto v = MaskedLoadFirstN(d, x + i, rest);
    const auto e = hn::IfThenElseZero(mask, ExpNonPositive(d, hn::MulSub(v, a, s)));
    StoreFirstN(e, d, x + i, rest);
    sum0 = hn::Add(sum0, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(sum0, sum1)));
}

void ScaleRow(float* x, int64_t n, float a) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto va = hn::Set(d, a);
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), va), d, x + i);
  for (; i < n; ++i) x[i] *= a;
}

void SoftCapRow(float* x, int64_t n, float c) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto vc = hn::Set(d, c), inv = hn::Set(d, 1.0f / c);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    hn::StoreU(hn::Mul(vc, hn::Tanh(d, hn::Mul(hn::LoadU(d, x + i), inv))), d, x + i);
  }
  for (; i < n; ++i) x[i] = c * std::tanh(x[i] / c);
}

float DotRow(const float* x, const float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  // Two partial sums: one FMA chain would bound the loop by the FMA latency.
  auto sum0 = hn::Zero(d), sum1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    sum0 = hn::MulAdd(hn::LoadU(d, x + i), hn::LoadU(d, y + i), sum0);
    sum1 = hn::MulAdd(hn::LoadU(d, x + i + L), hn::LoadU(d, y + i + L), sum1);
  }
  float result = hn::GetLane(hn::SumOfLanes(d, hn::Add(sum0, sum1)));
  for (; i < n; ++i) result += x[i] * y[i];
  return result;
}

void SoftmaxGradRow(const float* p, float* dp, int64_t n, float delta, const float* gate) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto vd = hn::Set(d, delta);
  int64_t i = 0;
  if (gate) {
    for (; i + L <= n; i += L) {
      const auto g = hn::Mul(hn::LoadU(d, p + i), hn::Sub(hn::LoadU(d, dp + i), vd));
      hn::StoreU(hn::Mul(g, hn::LoadU(d, gate + i)), d, dp + i);
    }
    for (; i < n; ++i) dp[i] = p[i] * (dp[i] - delta) * gate[i];
    return;
  }
  for (; i + L <= n; i += L) {
    hn::StoreU(hn::Mul(hn::LoadU(d, p + i), hn::Sub(hn::LoadU(d, dp + i), vd)), d, dp + i);
  }
  for (; i < n; ++i) dp[i] = p[i] * (dp[i] - delta);
}

// Columns in groups of up to kGroup vectors: the max pass keeps one running maximum per vector
// of the group, so kGroup independent chains hide the latency of Max; the exp pass has kGroup
// independent exponentials per row.
constexpr int kGroup = 4;
// How far a column's maximum may outgrow its shift before the shift (and the accumulators)
// follow: e^8 ~ 3e3, far from f32 overflow, while rescaling becomes rare once the first blocks
// have found the typical maximum.
constexpr float kLazyRescale = 8.0f;

template <int kVectors>
void SoftmaxColumnsGroup(float* HWY_RESTRICT s, int64_t n, int64_t ld, float scale,
                         float* HWY_RESTRICT run_max, float* HWY_RESTRICT run_sum,
                         float* HWY_RESTRICT rescale) {
  const hn::ScalableTag<float> d;
  const size_t L = hn::Lanes(d);
  const auto neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const auto a = hn::Set(d, scale);
  const auto lazy = hn::Set(d, kLazyRescale);
  hn::Vec<decltype(d)> mx[kVectors], shift[kVectors], sum[kVectors];
  for (int v = 0; v < kVectors; ++v) mx[v] = neg_inf;
  for (int64_t c = 0; c < n; ++c) {
    for (int v = 0; v < kVectors; ++v) mx[v] = hn::Max(mx[v], hn::LoadU(d, s + c * ld + v * L));
  }
  for (int v = 0; v < kVectors; ++v) {
    const auto old_max = hn::LoadU(d, run_max + v * L);
    // The shift moves only when the maximum outgrows it by more than kLazyRescale (and on the
    // first finite entry: -inf + kLazyRescale is -inf).
    const auto block_max = hn::Mul(a, mx[v]);
    const auto target =
        hn::IfThenElse(hn::Gt(block_max, hn::Add(old_max, lazy)), block_max, old_max);
    const auto seen = hn::Ne(target, neg_inf);
    // Columns that have seen nothing keep shift 0 (their entries are -inf: exp gives 0) and
    // rescale 1, instead of the NaN of -inf - -inf.
    shift[v] = hn::IfThenElseZero(seen, target);
    const auto r =
        hn::IfThenElse(seen, ExpNonPositive(d, hn::Sub(old_max, shift[v])), hn::Set(d, 1.0f));
    hn::StoreU(r, d, rescale + v * L);
    hn::StoreU(target, d, run_max + v * L);
    sum[v] = hn::Mul(hn::LoadU(d, run_sum + v * L), r);
  }
  for (int64_t c = 0; c < n; ++c) {
    for (int v = 0; v < kVectors; ++v) {
      float* at = s + c * ld + v * L;
      const auto e = ExpNonPositive(d, hn::MulSub(hn::LoadU(d, at), a, shift[v]));
      hn::StoreU(e, d, at);
      sum[v] = hn::Add(sum[v], e);
    }
  }
  for (int v = 0; v < kVectors; ++v) hn::StoreU(sum[v], d, run_sum + v * L);
}

void SoftmaxColumnsStep(float* s, int64_t n, int64_t cols, int64_t ld, float scale, float* run_max,
                        float* run_sum, float* rescale) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t m = 0;
  for (; m + kGroup * L <= cols; m += kGroup * L) {
    SoftmaxColumnsGroup<kGroup>(s + m, n, ld, scale, run_max + m, run_sum + m, rescale + m);
  }
  // The last 1..3 whole vectors in one group.
  switch ((cols - m) / L) {
    case 3:
      SoftmaxColumnsGroup<3>(s + m, n, ld, scale, run_max + m, run_sum + m, rescale + m);
      break;
    case 2:
      SoftmaxColumnsGroup<2>(s + m, n, ld, scale, run_max + m, run_sum + m, rescale + m);
      break;
    case 1:
      SoftmaxColumnsGroup<1>(s + m, n, ld, scale, run_max + m, run_sum + m, rescale + m);
      break;
    default:
      break;
  }
  m += (cols - m) / L * L;
  for (; m < cols; ++m) {  // columns past the last whole vector
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < n; ++c) mx = std::max(mx, s[c * ld + m]);
    const float target = scale * mx > run_max[m] + kLazyRescale ? scale * mx : run_max[m];
    const bool seen = target != -std::numeric_limits<float>::infinity();
    const float shift = seen ? target : 0.0f;
    rescale[m] = seen ? std::exp(run_max[m] - shift) : 1.0f;
    float sum = run_sum[m] * rescale[m];
    for (int64_t c = 0; c < n; ++c) {
      float& x = s[c * ld + m];
      x = x == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(scale * x - shift);
      sum += x;
    }
    run_max[m] = target;
    run_sum[m] = sum;
  }
}

void ScaleColumns(float* x, int64_t rows, int64_t cols, int64_t ld, const float* factor) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * ld;
    int64_t m = 0;
    for (; m + L <= cols; m += L) {
      hn::StoreU(hn::Mul(hn::LoadU(d, row + m), hn::LoadU(d, factor + m)), d, row + m);
    }
    for (; m < cols; ++m) row[m] *= factor[m];
  }
}

void MaskColumns(float* s, int64_t n, int64_t cols, int64_t ld, int64_t first, const int32_t* lo,
                 const int32_t* hi) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  for (int64_t c = 0; c < n; ++c) {
    float* row = s + c * ld;
    const int32_t key = static_cast<int32_t>(first + c);
    const auto vkey = hn::Set(di, key);
    int64_t m = 0;
    for (; m + L <= cols; m += L) {
      // Visible iff lo <= key < hi, i.e. key > lo - 1 and hi > key.
      const auto visible = hn::And(hn::Gt(vkey, hn::Sub(hn::LoadU(di, lo + m), hn::Set(di, 1))),
                                   hn::Gt(hn::LoadU(di, hi + m), vkey));
      hn::StoreU(hn::IfThenElse(hn::RebindMask(d, visible), hn::LoadU(d, row + m), neg_inf), d,
                 row + m);
    }
    for (; m < cols; ++m) {
      if (key < lo[m] || key >= hi[m]) row[m] = -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(RowMax);
HWY_EXPORT(ExpShiftSum);
HWY_EXPORT(ScaleRow);
HWY_EXPORT(SoftCapRow);
HWY_EXPORT(DotRow);
HWY_EXPORT(SoftmaxGradRow);
HWY_EXPORT(SoftmaxColumnsStep);
HWY_EXPORT(ScaleColumns);
HWY_EXPORT(MaskColumns);

float cpu_row_max(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(RowMax)(x, n); }
float cpu_exp_shift_sum(float* x, int64_t n, float shift, float scale) {
  return HWY_DYNAMIC_DISPATCH(ExpShiftSum)(x, n, shift, scale);
}
void cpu_scale_row(float* x, int64_t n, float a) { HWY_DYNAMIC_DISPATCH(ScaleRow)(x, n, a); }
void cpu_soft_cap_row(float* x, int64_t n, float c) { HWY_DYNAMIC_DISPATCH(SoftCapRow)(x, n, c); }
float cpu_dot_row(const float* x, const float* y, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotRow)(x, y, n);
}
void cpu_softmax_grad_row(const float* p, float* dp, int64_t n, float delta, const float* gate) {
  HWY_DYNAMIC_DISPATCH(SoftmaxGradRow)(p, dp, n, delta, gate);
}
void cpu_softmax_columns_step(float* s, int64_t n, int64_t cols, int64_t ld, float scale,
                              float* run_max, float* run_sum, float* rescale) {
  HWY_DYNAMIC_DISPATCH(SoftmaxColumnsStep)(s, n, cols, ld, scale, run_max, run_sum, rescale);
}
void cpu_scale_columns(float* x, int64_t rows, int64_t cols, int64_t ld, const float* factor) {
  HWY_DYNAMIC_DISPATCH(ScaleColumns)(x, rows, cols, ld, factor);
}
void cpu_mask_columns(float* s, int64_t n, int64_t cols, int64_t ld, int64_t first,
                      const int32_t* lo, const int32_t* hi) {
  HWY_DYNAMIC_DISPATCH(MaskColumns)(s, n, cols, ld, first, lo, hi);
}

}  // namespace tokamax
#endif  // HWY_ONCE
