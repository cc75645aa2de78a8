// CPU GEMM engine: per-target widening of bf16/f16/f32 elements, shared by the kernels.
//
// Dimensions.
//   L      lanes of one vector of the accumulation type (f32: 16 on AVX-512, 8 on AVX2)
//
// A Highway "-inl" header: every translation unit that compiles once per target (pack.cc,
// convert.cc, micro_kernel.cc, stream_kernel.cc) includes it after hwy/highway.h, and the
// toggle guard below lets foreach_target.h re-include it for each target. Defining the
// helpers once keeps the per-target namespaces (tokamax::N_AVX3, ...) free of two different
// definitions under one name, which the linker would silently merge.
#if defined(TOKAMAX_OPS_RAGGED_DOT_CPU_WIDEN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TOKAMAX_OPS_RAGGED_DOT_CPU_WIDEN_INL_H_
#undef TOKAMAX_OPS_RAGGED_DOT_CPU_WIDEN_INL_H_
#else
#define TOKAMAX_OPS_RAGGED_DOT_CPU_WIDEN_INL_H_
#endif

#include <hwy/highway.h>

#include <limits>
#include <type_traits>

#include "ops/framework/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// Highway's software targets (SCALAR with GCC, EMU128 with clang) convert f16 without inf/NaN
// and truncate on the way down; there the library's exact scalar conversions take over. x86
// vector targets use F16C.
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
constexpr bool kVectorConvert = false;
#else
constexpr bool kVectorConvert = true;
#endif

// One element widened to the accumulation type, exactly (bf16 and f16 fit in f32).
template <typename Acc, typename In>
inline Acc Widen(In x) {
  if constexpr (std::is_same_v<In, bf16> || std::is_same_v<In, f16>) {
    return static_cast<Acc>(to_float(x));
  } else {
    return static_cast<Acc>(x);
  }
}

// L consecutive elements widened to the accumulation type of `d` (bf16 by a 16-bit shift, f16
// by vcvtph2ps): cheap enough to run per FMA when the micro-kernel reads rhs in place.
template <class D, typename In>
HWY_INLINE hn::Vec<D> LoadWiden(D d, const In* HWY_RESTRICT src) {
  if constexpr (std::is_same_v<In, hn::TFromD<D>>) {
    return hn::LoadU(d, src);
  } else if constexpr (std::is_same_v<In, bf16>) {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::bfloat16_t, D>(),
                                      reinterpret_cast<const hwy::bfloat16_t*>(src)));
  } else if constexpr (!kVectorConvert) {
    HWY_ALIGN hn::TFromD<D> lanes[hn::MaxLanes(D())];
    for (size_t i = 0; i < hn::Lanes(d); ++i) lanes[i] = Widen<hn::TFromD<D>>(src[i]);
    return hn::Load(d, lanes);
  } else {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::float16_t, D>(),
                                      reinterpret_cast<const hwy::float16_t*>(src)));
  }
}

// A quantized code (i8 or e4m3) as f32, exactly.
inline float DecodeCode(int8_t x) { return static_cast<float>(x); }
inline float DecodeCode(f8e4m3 x) { return f8e4m3_to_float(x); }

// L consecutive quantized codes decoded to f32, exactly: i8 sign-extended and converted; e4m3
// rebuilt as an f16 (s eeee mmm -> s 0eeee mmm0000000: the same value over 2^8, f16's bias being
// 15 and e4m3's 7, subnormals included) widened by vcvtph2ps and scaled by 2^8, its NaN
// (s1111111, which reads 480 that way, past e4m3's largest finite 448) put back. The scalar
// targets decode element by element.
template <class D, typename Code>
HWY_INLINE hn::Vec<D> LoadDecode(D d, const Code* HWY_RESTRICT src) {
  static_assert(std::is_same_v<Code, int8_t> || std::is_same_v<Code, f8e4m3>);
  if constexpr (!kVectorConvert) {
    HWY_ALIGN float lanes[hn::MaxLanes(D())];
    for (size_t i = 0; i < hn::Lanes(d); ++i) lanes[i] = DecodeCode(src[i]);
    return hn::Load(d, lanes);
  } else if constexpr (std::is_same_v<Code, int8_t>) {
    return hn::ConvertTo(
        d, hn::PromoteTo(hn::RebindToSigned<D>(), hn::LoadU(hn::Rebind<int8_t, D>(), src)));
  } else {
    const hn::Rebind<uint16_t, D> du16;
    const auto b = hn::PromoteTo(
        du16, hn::LoadU(hn::Rebind<uint8_t, D>(), reinterpret_cast<const uint8_t*>(src)));
    const auto bits = hn::Or(hn::ShiftLeft<7>(hn::And(b, hn::Set(du16, 0x7F))),
                             hn::ShiftLeft<8>(hn::And(b, hn::Set(du16, 0x80))));
    const auto v = hn::Mul(hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), bits)),
                           hn::Set(d, 256.0f));
    return hn::IfThenElse(hn::Eq(hn::Abs(v), hn::Set(d, 480.0f)),
                          hn::Set(d, std::numeric_limits<float>::quiet_NaN()), v);
  }
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TOKAMAX_OPS_RAGGED_DOT_CPU_WIDEN_INL_H_ toggle
