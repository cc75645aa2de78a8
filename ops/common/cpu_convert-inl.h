// CPU kernels: per-target conversions between f32 registers and f32 / bf16 / f16 memory
// (widening loads, rounding and streaming stores, the bf16 pair order) and software prefetch,
// shared by the memory-bound kernels (layer_norm, the row gathers).
//
// Dimensions.
//   L      f32 lanes of the Highway target (16 on AVX-512, 8 on AVX2, 1 scalar)
//
// A Highway "-inl" header: each translation unit that compiles once per target includes it
// after hwy/highway.h, and the toggle guard lets foreach_target.h re-include it per target. Its
// definitions sit in an anonymous namespace, so the per-target namespaces of two translation
// units never hold two definitions under one name.
#if defined(TOKAMAX_OPS_COMMON_CPU_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TOKAMAX_OPS_COMMON_CPU_CONVERT_INL_H_
#undef TOKAMAX_OPS_COMMON_CPU_CONVERT_INL_H_
#else
#define TOKAMAX_OPS_COMMON_CPU_CONVERT_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/framework/dtype.h"
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

// v rounded to bf16 (nearest even, exactly as float_to_bf16: add 0x7FFF plus the lowest kept bit
// and truncate) in the high 16 bits of each 32-bit lane, the low bits garbage; NaNs are forced
// quiet instead (rounding could carry them into infinity).
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> RoundBf16High(VF v) {
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::Add(bits, hn::Add(lsb, hn::Set(du, 0x7FFFu)));
  const auto quiet_nan = hn::Or(bits, hn::Set(du, 0x00400000u));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet_nan, rounded);
}

// f32 -> bf16 rounded to nearest even (RoundBf16High), narrowed to 16-bit lanes.
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> DemoteBf16(VF v) {
  const hn::RebindToSigned<DF> di32;
  const hn::Rebind<uint16_t, DF> du16;
  // Every lane is < 2^16, so the saturating i32 -> u16 demotion is exact.
  return hn::DemoteTo(du16, hn::BitCast(di32, hn::ShiftRight<16>(RoundBf16High(v))));
}

// f32 -> bf16 by vcvtneps2bf16 (avx512_bf16): round to nearest even in one instruction instead
// of the ten of DemoteBf16, a quarter of the output pass. It flushes subnormal inputs to zero,
// which the callers' error models allow for. Inline asm, because Highway 1.0.3 has
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

// v stored; with kStream by a non-temporal store, which needs `dst` aligned to the vector's size
// (the launch checks that).
template <bool kStream, class D, class V>
HWY_INLINE void StoreVec(D d, V v, hn::TFromD<D>* HWY_RESTRICT dst) {
  if constexpr (kStream) {
    hn::Stream(v, d, dst);
  } else {
    hn::StoreU(v, d, dst);
  }
}

// bf16 pairs: 2L bf16 read as L 32-bit words widen to f32 with two ALU operations per 2L lanes
// (LoadWiden: a widening shuffle and a shift per L), without reordering across lanes: `even`
// gets elements 0, 2, 4, ... (the low halves of the words, shifted up), `odd` elements 1, 3,
// 5, ... (the high halves, masked). Kernels whose lanes are independent columns, or that only
// sum across lanes, keep their per-column data in this order ("pair order": for the 2L columns
// of a pair at j, lane k of [j, j + L) is column j + 2k, lane k of [j + L, j + 2L) column
// j + 2k + 1) and never reorder, and StorePairBf16 rounds both back into 2L bf16 in memory
// order: about half the widening and output work of LoadWiden/StoreNarrow. Not on the SCALAR
// target (one lane: a pair would be a vector of two bf16 in one f32 lane).
constexpr bool kHasPairPath = HWY_TARGET != HWY_SCALAR;
HWY_INLINE void LoadWidenPair(const bf16* HWY_RESTRICT src, VF& even, VF& odd) {
  const DF d;
  const hn::RebindToUnsigned<DF> du;
  const auto words = hn::LoadU(du, reinterpret_cast<const uint32_t*>(src));
  even = hn::BitCast(d, hn::ShiftLeft<16>(words));
  odd = hn::BitCast(d, hn::And(words, hn::Set(du, 0xFFFF0000u)));
}

// Rounds `even` and `odd` (pair order) to bf16 and stores the 2L bf16 in memory order; with
// kStream non-temporally (dst aligned to 4L bytes). native (AVX-512 with avx512_bf16 only:
// callers check the CPU): nearest even by vcvtne2ps2bf16, which flushes subnormals to zero as
// DemoteBf16Native; otherwise exact (RoundBf16High) and recombined by one 16-bit blend.
template <bool kStream>
HWY_INLINE void StorePairBf16(VF even, VF odd, bf16* HWY_RESTRICT dst, bool native) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if (native) {
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
    return;
  }
#else
  (void)native;
#endif
#if HWY_TARGET != HWY_SCALAR                 // kHasPairPath
  const hn::Repartition<uint16_t, DF> du16;  // 2L lanes
  // Lane 2k (the low half of word k): even's rounded high half shifted down; lane 2k + 1: odd's.
  const auto words = hn::OddEven(hn::BitCast(du16, RoundBf16High(odd)),
                                 hn::BitCast(du16, hn::ShiftRight<16>(RoundBf16High(even))));
  StoreVec<kStream>(du16, words, reinterpret_cast<uint16_t*>(dst));
#else
  (void)even, (void)odd, (void)dst;
#endif
}

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

// L lanes rounded to T (nearest even) and stored; with kStream non-temporally (dst aligned to the
// narrow vector's size).
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

// Software prefetch, for kernels that read memory in short bursts (a row between stretches of
// arithmetic on cached data, rows at scattered addresses): that leaves the hardware prefetchers
// too little lead, and alone they reach about a third of the copy bandwidth of a core. Into L2
// on x86 (T1): a burst of L1 prefetches would fill the line-fill buffers that the demand loads
// of the current rows need.
// The line at p into L2 (x86: T1) or, elsewhere, as hwy::Prefetch does.
HWY_INLINE void PrefetchL2(const char* p) {
#if HWY_ARCH_X86
  _mm_prefetch(p, _MM_HINT_T1);
#else
  hwy::Prefetch(p);
#endif
}

// [begin, begin + bytes) into L2, a line at a time.
HWY_INLINE void PrefetchRange(const void* begin, int64_t bytes) {
  const char* p = static_cast<const char*>(begin);
  for (int64_t offset = 0; offset < bytes; offset += 64) PrefetchL2(p + offset);
}

template <typename T>
HWY_INLINE float WidenScalar(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return to_float(v);
  }
}

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TOKAMAX_OPS_COMMON_CPU_CONVERT_INL_H_ toggle
