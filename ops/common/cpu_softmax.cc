// Vectorized softmax pieces, compiled once per SIMD target by Highway.
#include "ops/common/cpu_softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/cpu_softmax.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "ops/common/cpu_exp-inl.h"

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
    const auto v = hn::MaskedLoad(mask, d, x + i);
    const auto e = hn::IfThenElseZero(mask, ExpNonPositive(d, hn::MulSub(v, a, s)));
    hn::BlendedStore(e, mask, d, x + i);
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

const char* SoftmaxTargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(RowMax);
HWY_EXPORT(ExpShiftSum);
HWY_EXPORT(ScaleRow);
HWY_EXPORT(SoftCapRow);
HWY_EXPORT(SoftmaxTargetName);

float cpu_row_max(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(RowMax)(x, n); }
float cpu_exp_shift_sum(float* x, int64_t n, float shift, float scale) {
  return HWY_DYNAMIC_DISPATCH(ExpShiftSum)(x, n, shift, scale);
}
void cpu_scale_row(float* x, int64_t n, float a) { HWY_DYNAMIC_DISPATCH(ScaleRow)(x, n, a); }
void cpu_soft_cap_row(float* x, int64_t n, float c) { HWY_DYNAMIC_DISPATCH(SoftCapRow)(x, n, c); }
const char* cpu_softmax_target_name() { return HWY_DYNAMIC_DISPATCH(SoftmaxTargetName)(); }

}  // namespace tokamax
#endif  // HWY_ONCE
