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

// e^t for t <= 0, in about 2 ulps: t = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite split of ln2,
// so r is exact to a few ulps), e^r by its degree-7 Taylor polynomial (truncation < 2^-27
// relative), and 2^n added to the exponent field. About 16 operations against hn::Exp's 26,
// which also handles overflow and range splitting that t <= 0 never needs. Below t = -86 (e^t <
// 5e-38, where the exponent trick would leave the normal range) the result is flushed to
// exactly 0, so -inf (a masked logit) gives 0.
template <class DF, class VF = hn::Vec<DF>>
HWY_INLINE VF ExpNonPositive(DF d, VF t) {
  const hn::RebindToSigned<DF> di;
  const VF lower = hn::Set(d, -86.0f);
  const VF clamped = hn::Max(t, lower);
  const VF n = hn::Round(hn::Mul(clamped, hn::Set(d, 1.44269504088896341f)));
  VF r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), clamped);  // ln2, high bits (exact n * hi)
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);        // ln2, the rest
  VF p = hn::Set(d, 1.0f / 5040);
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 720));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 120));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 24));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 6));
  p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  // p in [0.7, 1.5] and n in [-125, 0]: adding n to the exponent stays normal.
  const auto scaled = hn::Add(hn::BitCast(di, p), hn::ShiftLeft<23>(hn::ConvertTo(di, n)));
  return hn::IfThenZeroElse(hn::Lt(t, lower), hn::BitCast(d, scaled));
}

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TOKAMAX_OPS_COMMON_CPU_EXP_INL_H_
