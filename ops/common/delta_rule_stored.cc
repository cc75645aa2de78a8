// The delta rule's state stored in f32, bf16 or f16 (delta_rule_rows.h): its load and store,
// compiled once per SIMD target by Highway. A token's passes from and to it are in
// delta_rule_decode.cc.
//
// Dimensions: as delta_rule_rows.h; L the f32 lanes of the target.
#include <hwy/cache_control.h>

#include <cstdint>

#include "ops/common/delta_rule_rows.h"
#include "ops/framework/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/delta_rule_stored.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>
// The per-target conversions need highway.h first.
#include "ops/common/cpu_convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// dst[i] = src[i] widened to f32 (src f32, bf16 or f16).
template <typename T>
void LoadStateT(const T* src, float* dst, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(LoadWiden(d, src + i), d, dst + i);
  for (; i < n; ++i) dst[i] = static_cast<float>(to_double(src[i]));
}

void LoadState(DType dtype, const void* src, float* dst, int64_t n) {
  if (dtype == DType::kBF16) return LoadStateT(static_cast<const bf16*>(src), dst, n);
  if (dtype == DType::kF16) return LoadStateT(static_cast<const f16*>(src), dst, n);
  LoadStateT(static_cast<const float*>(src), dst, n);
}

// dst[i] = src[i] rounded to T; by non-temporal stores when dst is 64-byte aligned (a state
// written once and not read again by this task: no read of its lines before the write).
template <typename T>
void StoreStateT(const float* src, T* dst, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  if (reinterpret_cast<uintptr_t>(dst) % 64 == 0) {
    for (; i + L <= n; i += L) StoreNarrow<T, true>(d, hn::LoadU(d, src + i), dst + i, false);
  } else {
    for (; i + L <= n; i += L) StoreNarrow<T, false>(d, hn::LoadU(d, src + i), dst + i, false);
  }
  for (; i < n; ++i) dst[i] = Narrow<T>(src[i]);
}

void StoreState(DType dtype, const float* src, void* dst, int64_t n) {
  if (dtype == DType::kBF16) return StoreStateT(src, static_cast<bf16*>(dst), n);
  if (dtype == DType::kF16) return StoreStateT(src, static_cast<f16*>(dst), n);
  StoreStateT(src, static_cast<float*>(dst), n);
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(LoadState);
HWY_EXPORT(StoreState);

void delta_rule_load_state(DType dtype, const void* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(LoadState)(dtype, src, dst, n);
}

void delta_rule_store_state(DType dtype, const float* src, void* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(StoreState)(dtype, src, dst, n);
  hwy::FlushStream();  // drains the non-temporal stores before the task ends
}

}  // namespace tokamax
#endif  // HWY_ONCE
