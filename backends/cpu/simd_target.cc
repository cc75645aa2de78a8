// The dispatched Highway target and its vector widths (simd_target.h).
#include "backends/cpu/simd_target.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/simd_target.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tokamax::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }
int F32Lanes() { return static_cast<int>(hn::MaxLanes(hn::ScalableTag<float>())); }
int F64Lanes() { return static_cast<int>(hn::MaxLanes(hn::ScalableTag<double>())); }

}  // namespace tokamax::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax::cpu {

HWY_EXPORT(TargetName);
HWY_EXPORT(F32Lanes);
HWY_EXPORT(F64Lanes);

const char* simd_target_name() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }
int simd_f32_lanes() { return HWY_DYNAMIC_DISPATCH(F32Lanes)(); }
int simd_f64_lanes() { return HWY_DYNAMIC_DISPATCH(F64Lanes)(); }

}  // namespace tokamax::cpu
#endif  // HWY_ONCE
