// layer_norm on CPU: per-target SIMD helpers of the kernels (widening loads, rounding stores,
// prefetch, dtype dispatch), shared by cpu_kernel_last.cc and cpu_kernel_inner.cc.
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

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <cstring>
#include <string>
#include <type_traits>

#include "ops/framework/dtype.h"
#include "ops/framework/errors.h"
#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// Layer norm statistics in one pass of shifted sums: d = x - shift, with the shift the first
// element of the row (last axis) or column (strided axes). The f32 variance sum(d^2)/C -
// mean(d)^2 then has a relative error of about (1 + ratio) times the summation's, ratio =
// (mean - shift)^2 / variance. The shift is one of the C elements, so the ratio is at most C,
// and for typical data a few units. kMaxShiftRatio is the largest ratio kept (at most 17 times
// the summation error, the order of the two-pass sums'); a row or column past it (its first
// element 4 sigma out: 0.006% of normal data) takes the two-pass statistics from cache.
constexpr float kMaxShiftRatio = 16.0f;

// L consecutive elements widened to f32 exactly (bf16 by a 16-bit shift, f16 by vcvtph2ps).
// Highway's software targets (SCALAR with GCC, EMU128 with clang) convert f16 without inf/NaN
// and truncate on the way down; there the library's exact conversions are used, lane by lane.
template <typename T>
HWY_INLINE VF LoadWiden(DF d, const T* HWY_RESTRICT src) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(d, src);
  } else if constexpr (std::is_same_v<T, bf16>) {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(),
                                      reinterpret_cast<const hwy::bfloat16_t*>(src)));
  } else {
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
    alignas(64) float lanes[kMaxLanes];
    for (size_t i = 0; i < hn::Lanes(d); ++i) lanes[i] = f16_to_float(src[i]);
    return hn::LoadU(d, lanes);
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

// bf16 pairs (AVX-512 with avx512_bf16 only): 2L bf16 read as L 32-bit words widen to f32 in one
// instruction per L lanes, without reordering across lanes: `even` gets elements 0, 2, 4, ...
// (the low halves of the words, shifted up), `odd` elements 1, 3, 5, ... (the high halves,
// masked). Kernels whose lanes are independent columns keep their per-column data in this
// order ("pair order": for the 2L columns of a pair at j, lane k of [j, j + L) is column j + 2k,
// lane k of [j + L, j + 2L) column j + 2k + 1) and never reorder, and StorePairBf16 rounds both
// back into 2L bf16 in memory order: half the widening and output work of LoadWiden/StoreNarrow.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr bool kHasBf16PairPath = true;
HWY_INLINE void LoadWidenPair(const bf16* HWY_RESTRICT src, VF& even, VF& odd) {
  const __m512i words = _mm512_loadu_si512(src);
  even = VF{_mm512_castsi512_ps(_mm512_slli_epi32(words, 16))};
  odd = VF{_mm512_castsi512_ps(
      _mm512_and_si512(words, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))))};
}
// Rounds `even` and `odd` (nearest even by vcvtne2ps2bf16; subnormals flush to zero, as
// DemoteBf16Native) and stores the 2L bf16 in memory order; with kStream non-temporally (dst
// 64-byte aligned).
template <bool kStream>
HWY_INLINE void StorePairBf16(VF even, VF odd, bf16* HWY_RESTRICT dst) {
  __m512i halves;  // words 0..15: even rounded, 16..31: odd rounded
  asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(halves) : "v"(odd.raw), "v"(even.raw));
  const __m512i interleave =
      _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i words = _mm512_permutexvar_epi16(interleave, halves);
  if constexpr (kStream) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), words);
  } else {
    _mm512_storeu_si512(dst, words);
  }
}
#else
constexpr bool kHasBf16PairPath = false;
HWY_INLINE void LoadWidenPair(const bf16* HWY_RESTRICT, VF&, VF&) {}
template <bool kStream>
HWY_INLINE void StorePairBf16(VF, VF, bf16* HWY_RESTRICT) {}
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
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
    alignas(64) float lanes[kMaxLanes];
    hn::StoreU(v, d, lanes);
    for (size_t i = 0; i < hn::Lanes(d); ++i) dst[i] = float_to_f16(lanes[i]);
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
