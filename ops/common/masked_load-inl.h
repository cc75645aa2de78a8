// A masked load that reads nothing past the lanes it keeps, on every SIMD target.
//
// Highway's MaskedLoad is a hardware masked load on AVX2 (32/64-bit lanes) and AVX-512, which
// never touches a masked-off lane, but on EMU128 and SCALAR (CPUs without AVX2, forced targets)
// it is a full load then a blend (HWY_MEM_OPS_MIGHT_FAULT): a tail at the end of a buffer would be
// read past its end. MaskedLoadFirstN copies the kept lanes through the stack there instead.
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

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TOKAMAX_OPS_COMMON_MASKED_LOAD_INL_H_
