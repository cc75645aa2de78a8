// The exponential of non-positive arguments, per SIMD target: the one vector exp behind the
// sigmoid-based activations (cpu_activation.cc) and the softmax rows (cpu_softmax.cc).
//
// A Highway "-inl" header: each translation unit that compiles once per target includes it
// after hwy/highway.h, and the toggle guard lets foreach_target.h re-include it per target. Its
// definitions sit in an anonymous namespace, so the per-target namespaces of two translation
// units never hold two definitions under one name.
#if defined(TOKAMAX_OPS_COMMON_CPU_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TOKAMAX_OPS_COMMON_CPU_EXP_INL_H_
#undef TOKAMAX_OPS_COMMON_CPU_EXP_INL_H_
#else
#define TOKAMAX_OPS_COMMON_CPU_EXP_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace {
namespace hn = hwy::HWY_NAMESPACE;

// e^t for t <= 0, to about 1 ulp: t = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite split of ln2,
// so r is exact to a few ulps), e^r = 1 + r + r^2 q(r) with q of degree 4 fitted for relative
// error on that interval (8e-8 evaluated in f32, below Taylor's degree 7), and 2^n added to the
// exponent field. n comes from the 1.5 * 2^23 trick: adding it rounds t / ln2 to an integer held
// in the low mantissa bits, which shifted left by 23 are n's exponent increment, so neither a
// round nor a float-to-int conversion (Highway's fixes up overflow: 3 more operations) is
// needed. About 14 operations against hn::Exp's 26, which also handles overflow and range
// splitting that t <= 0 never needs. Below t = -86 (e^t < 5e-38, where the exponent trick would
// leave the normal range) the result is flushed to exactly 0, so -inf (a masked logit) gives 0.
template <class DF, class VF = hn::Vec<DF>>
HWY_INLINE VF ExpNonPositive(DF d, VF t) {
  const hn::RebindToSigned<DF> di;
  const VF lower = hn::Set(d, -86.0f);
  const VF clamped = hn::Max(t, lower);
  const VF magic = hn::Set(d, 12582912.0f);  // 1.5 * 2^23: its ulp is 1
  const VF shifted = hn::MulAdd(clamped, hn::Set(d, 1.44269504088896341f), magic);
  const VF n = hn::Sub(shifted, magic);                        // round(t / ln2), exactly
  VF r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), clamped);  // ln2, high bits (exact n * hi)
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);        // ln2, the rest
  VF p = hn::Set(d, 1.381454442e-3f);
  p = hn::MulAdd(p, r, hn::Set(d, 8.368745537e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.166839072e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.666652039e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.999999343e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  // p in [0.7, 1.5] and n in [-125, 0]: adding n to the exponent stays normal. The bits of
  // `shifted` are those of 1.5 * 2^23 plus n, whose own bits vanish when shifted by 23.
  const auto scaled = hn::Add(hn::BitCast(di, p), hn::ShiftLeft<23>(hn::BitCast(di, shifted)));
  return hn::IfThenZeroElse(hn::Lt(t, lower), hn::BitCast(d, scaled));
}

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TOKAMAX_OPS_COMMON_CPU_EXP_INL_H_
