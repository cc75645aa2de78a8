// layer_norm on CPU: per-target SIMD helpers of the kernels (the shifted-sum limit, the pair
// order of cached columns, dtype dispatch) on top of ops/common/cpu_convert-inl.h, shared by
// cpu_kernel_last.cc and cpu_kernel_inner.cc.
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//   w      inner elements of the current block (<= tI); w_pad = w rounded up to L
//   L      f32 lanes of the Highway target (16 on AVX-512, 8 on AVX2, 1 scalar)
//
// A Highway "-inl" header: each translation unit that compiles once per target includes it
// after hwy/highway.h, and the toggle guard lets foreach_target.h re-include it per target. Its
// definitions sit in an anonymous namespace, so the per-target namespaces of two translation
// units never hold two definitions under one name.
#if defined(TOKAMAX_OPS_LAYER_NORM_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TOKAMAX_OPS_LAYER_NORM_CPU_SIMD_INL_H_
#undef TOKAMAX_OPS_LAYER_NORM_CPU_SIMD_INL_H_
#else
#define TOKAMAX_OPS_LAYER_NORM_CPU_SIMD_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "ops/common/cpu_convert-inl.h"
#include "ops/framework/dtype.h"
#include "ops/framework/errors.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace {
namespace hn = hwy::HWY_NAMESPACE;

// Layer norm statistics in one pass of shifted sums: d = x - shift, with the shift the first
// element of the row (last axis) or column (strided axes). The f32 variance sum(d^2)/C -
// mean(d)^2 then has a relative error of about (1 + ratio) times the summation's, ratio =
// (mean - shift)^2 / variance. The shift is one of the C elements, so the ratio is at most C,
// and for typical data a few units. kMaxShiftRatio is the largest ratio kept (at most 17 times
// the summation error, the order of the two-pass sums'); a row or column past it (its first
// element 4 sigma out: 0.006% of normal data) takes the two-pass statistics from cache.
constexpr float kMaxShiftRatio = 16.0f;

// C per-column f32 values (C a multiple of 2L) put in pair order (cpu_convert-inl.h): dst[c + k] =
// src[c + 2k], dst[c + L + k] = src[c + 2k + 1] for each pair at c.
HWY_INLINE void ToPairOrder(const float* HWY_RESTRICT src, int64_t C, float* HWY_RESTRICT dst) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(DF()));
  for (int64_t c = 0; c < C; c += 2 * L) {
    for (int64_t k = 0; k < L; ++k) {
      dst[c + k] = src[c + 2 * k];
      dst[c + L + k] = src[c + 2 * k + 1];
    }
  }
}

// The inverse of ToPairOrder, added to dst (memory order).
HWY_INLINE void AddFromPairOrder(const float* HWY_RESTRICT src, int64_t C,
                                 float* HWY_RESTRICT dst) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(DF()));
  for (int64_t c = 0; c < C; c += 2 * L) {
    for (int64_t k = 0; k < L; ++k) {
      dst[c + 2 * k] += src[c + k];
      dst[c + 2 * k + 1] += src[c + L + k];
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

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TOKAMAX_OPS_LAYER_NORM_CPU_SIMD_INL_H_ toggle
