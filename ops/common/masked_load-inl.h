// A masked load that reads nothing past the lanes it keeps, and a store of a vector's first
// lanes that writes nothing past them, on every SIMD target.
//
// Highway's MaskedLoad is a hardware masked load on AVX2 (32/64-bit lanes) and AVX-512, which
// never touches a masked-off lane, but on EMU128 and SCALAR (CPUs without AVX2, forced targets)
// it is a full load then a blend (HWY_MEM_OPS_MIGHT_FAULT): a tail at the end of a buffer would be
// read past its end. MaskedLoadFirstN copies the kept lanes through the stack there instead.
//
// StoreFirstN exists because AVX2's masked store (vmaskmovps) is microcoded on AMD: several
// times the cost of the 128 + 64-bit stores used here, enough to make the packing of 6-wide
// micro-panels a large part of the attention backward's time (measured:
// docs/measurement_log.md, "AVX2 masked stores").
//
// A Highway "-inl" header (see ops/common/cpu_gemm/widen-inl.h for the toggle guard).
#if defined(TOKAMAX_OPS_COMMON_MASKED_LOAD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TOKAMAX_OPS_COMMON_MASKED_LOAD_INL_H_
#undef TOKAMAX_OPS_COMMON_MASKED_LOAD_INL_H_
#else
#define TOKAMAX_OPS_COMMON_MASKED_LOAD_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>
#include <type_traits>

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lanes [0, count) of p (count <= Lanes(d)), zeros in the others.
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE hn::Vec<D> MaskedLoadFirstN(D d, const T* HWY_RESTRICT p, size_t count) {
#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
  HWY_ALIGN T lanes[hn::MaxLanes(D())] = {};
  for (size_t i = 0; i < count; ++i) lanes[i] = p[i];
  return hn::Load(d, lanes);
#else
  static_assert(sizeof(T) >= 4 || HWY_TARGET <= HWY_AVX3,
                "AVX2 masks 8/16-bit lanes with a full load");
  return hn::MaskedLoad(hn::FirstN(d, count), d, p);
#endif
}

// Stores lanes [0, count) of v to p (count <= Lanes(d)) and nothing else. AVX2 f32: whole
// 128 / 64 / 32-bit pieces instead of vmaskmovps; elsewhere Highway's BlendedStore (AVX-512's
// masked store is one fast instruction; EMU128 and SCALAR store lane by lane).
template <class D, typename T = hn::TFromD<D>>
HWY_INLINE void StoreFirstN(hn::Vec<D> v, D d, T* HWY_RESTRICT p, size_t count) {
#if HWY_TARGET == HWY_AVX2
  if constexpr (std::is_same_v<T, float> && hn::MaxLanes(D()) == 8) {
    if (count >= 8) {
      hn::StoreU(v, d, p);
      return;
    }
    __m128 part = _mm256_castps256_ps128(v.raw);
    if (count >= 4) {
      _mm_storeu_ps(p, part);
      part = _mm256_extractf128_ps(v.raw, 1);
      p += 4;
      count -= 4;
    }
    if (count >= 2) {
      _mm_storel_pi(reinterpret_cast<__m64*>(p), part);
      part = _mm_movehl_ps(part, part);
      p += 2;
      count -= 2;
    }
    if (count == 1) _mm_store_ss(p, part);
    return;
  }
#endif
  hn::BlendedStore(v, hn::FirstN(d, count), d, p);
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TOKAMAX_OPS_COMMON_MASKED_LOAD_INL_H_
