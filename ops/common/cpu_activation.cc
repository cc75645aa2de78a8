// Vectorized activations and the GLU combine, compiled once per SIMD target by Highway.
//
// Dimensions.
//   n      elements of one row
//   L      f32 lanes of the Highway target
#include "ops/common/cpu_activation.h"

#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/cpu_activation.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "ops/common/cpu_exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Newton steps that take the hardware estimate past f32's 24 bits. AVX-512's 14-bit estimate
// needs one (28 bits). AVX2's 12-bit one reaches only 24 after one (NEON's 8-bit one 16), and a
// step always lands below 1 / x: 1 / 1 and 1 / 2 came out one ulp low, so sigmoid(0) missed 0.5
// and sigmoid(large) stopped short of 1. Those targets take a second step.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr int kReciprocalNewtonSteps = 1;
#else
constexpr int kReciprocalNewtonSteps = 2;
#endif

// 1 / d to about 1 f32 ulp (exact at powers of 2): the hardware estimate refined by Newton
// steps, each of which doubles the bits. A full-precision divide issues at a fraction of the FMA
// rate and would cost more than the rest of the activation; a step costs two FMAs.
HWY_INLINE VF ActReciprocal(DF d, VF x) {
  VF r = hn::ApproximateReciprocal(x);
  for (int step = 0; step < kReciprocalNewtonSteps; ++step) {
    r = hn::MulAdd(r, hn::NegMulAdd(x, r, hn::Set(d, 1.0f)), r);
  }
  return r;
}

// erf(x) as x P(x^2) / Q(x^2) on x clamped to [-4, 4] (|erf| rounds to 1 in f32 beyond 3.92):
// the degree 13/8 rational minimax fit that Eigen publishes for float (generic_fast_erf_float).
// Measured against std::erf in double over [-6, 6] it stays within a few f32 ulps of
// max(|erf(x)|, 2^-126); the quotient of two polynomials without cancellation keeps the
// relative error small near 0 too, where erf(x) ~ 1.128 x.
HWY_INLINE VF ActErf(DF d, VF x) {
  const VF z = hn::Min(hn::Max(x, hn::Set(d, -4.0f)), hn::Set(d, 4.0f));
  const VF z2 = hn::Mul(z, z);
  VF p = hn::Set(d, -2.72614225801306e-10f);
  p = hn::MulAdd(p, z2, hn::Set(d, 2.77068142495902e-08f));
  p = hn::MulAdd(p, z2, hn::Set(d, -2.10102402082508e-06f));
  p = hn::MulAdd(p, z2, hn::Set(d, -5.69250639462346e-05f));
  p = hn::MulAdd(p, z2, hn::Set(d, -7.34990630326855e-04f));
  p = hn::MulAdd(p, z2, hn::Set(d, -2.95459980854025e-03f));
  p = hn::MulAdd(p, z2, hn::Set(d, -1.60960333262415e-02f));
  VF q = hn::Set(d, -1.45660718464996e-05f);
  q = hn::MulAdd(q, z2, hn::Set(d, -2.13374055278905e-04f));
  q = hn::MulAdd(q, z2, hn::Set(d, -1.68282697438203e-03f));
  q = hn::MulAdd(q, z2, hn::Set(d, -7.37332916720468e-03f));
  q = hn::MulAdd(q, z2, hn::Set(d, -1.42647390514189e-02f));
  const VF erf = hn::Mul(hn::Mul(z, p), ActReciprocal(d, q));
  return hn::Min(hn::Max(erf, hn::Set(d, -1.0f)), hn::Set(d, 1.0f));
}

// 1 / (1 + e^-x) from e = e^-|x| in [0, 1]: no overflow for very negative x (where e^-x would be
// inf), and e / (1 + e) keeps full relative precision in the tail where the result is tiny.
HWY_INLINE VF ActSigmoid(DF d, VF x) {
  const VF e = ExpNonPositive(d, hn::Neg(hn::Abs(x)));
  const VF positive = ActReciprocal(d, hn::Add(hn::Set(d, 1.0f), e));
  return hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Mul(e, positive), positive);
}

template <Activation kAct>
HWY_INLINE VF ActApply(DF d, VF x) {
  if constexpr (kAct == Activation::kNone) {
    return x;
  } else if constexpr (kAct == Activation::kSilu) {
    return hn::Mul(x, ActSigmoid(d, x));
  } else if constexpr (kAct == Activation::kGelu) {
    const VF half_x = hn::Mul(hn::Set(d, 0.5f), x);
    const VF erf = ActErf(d, hn::Mul(x, hn::Set(d, 0.70710678118654752f)));
    return hn::MulAdd(half_x, erf, half_x);  // 0.5 x (1 + erf)
  } else if constexpr (kAct == Activation::kGeluTanh) {
    // 0.5 x (1 + tanh(y)) = x sigmoid(2 y): one exponential, no tanh (hn::Tanh costs ~1.5x).
    const VF x3 = hn::Mul(hn::Mul(x, x), x);
    const VF two_y =
        hn::Mul(hn::Set(d, 2.0f * 0.7978845608028654f), hn::MulAdd(hn::Set(d, 0.044715f), x3, x));
    return hn::Mul(x, ActSigmoid(d, two_y));
  } else if constexpr (kAct == Activation::kSigmoid) {
    return ActSigmoid(d, x);
  } else {
    return hn::Max(x, hn::Zero(d));
  }
}

// out = act(gate + gate_bias) * (proj + proj_bias) in one pass; a null bias adds nothing and a
// null proj leaves act(gate + gate_bias). kForm kClamped: a clamped form instead (activation.h's
// clamped_glu: (clamp(p, -limit, limit) + offset) g sigmoid(alpha g), g = min(gate, limit)),
// with the reference's comparisons (a NaN gate gives the limit, a NaN proj stays NaN); kSitu:
// situ_glu's beta tanh(g / beta) sigmoid(g) times p, soft-capped to lb tanh(p / lb) when lb > 0.
// The last partial vector goes through zero-padded stack copies, so every element takes the same
// vector code path (no scalar tail whose rounding would differ from the body's).
enum class GluKind { kPlain, kClamped, kSitu };

template <Activation kAct, GluKind kForm = GluKind::kPlain>
void GluRowT(const float* gate, const float* gate_bias, const float* proj, const float* proj_bias,
             float* out, int64_t n, const ClampedGlu& form = {}, const SituGlu& situ = {}) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  auto step = [&](const float* g_in, const float* gb, const float* p_in, const float* pb,
                  float* dst) {
    VF g = hn::LoadU(d, g_in);
    if (gb != nullptr) g = hn::Add(g, hn::LoadU(d, gb));
    VF a;
    if constexpr (kForm == GluKind::kClamped) {
      const VF limit = hn::Set(d, static_cast<float>(form.limit));
      g = hn::IfThenElse(hn::Lt(g, limit), g, limit);
      a = hn::Mul(g, ActSigmoid(d, hn::Mul(hn::Set(d, static_cast<float>(form.alpha)), g)));
    } else if constexpr (kForm == GluKind::kSitu) {
      const VF beta = hn::Set(d, static_cast<float>(situ.beta));
      const VF capped = hn::Mul(beta, hn::Tanh(d, hn::Div(g, beta)));
      a = hn::Mul(capped, ActSigmoid(d, g));
    } else {
      a = ActApply<kAct>(d, g);
    }
    if (p_in != nullptr) {
      VF p = hn::LoadU(d, p_in);
      if (pb != nullptr) p = hn::Add(p, hn::LoadU(d, pb));
      if constexpr (kForm == GluKind::kSitu) {
        if (situ.linear_beta > 0.0) {
          const VF cap = hn::Set(d, static_cast<float>(situ.linear_beta));
          p = hn::Mul(cap, hn::Tanh(d, hn::Div(p, cap)));
        }
      }
      if constexpr (kForm == GluKind::kClamped) {
        const VF limit = hn::Set(d, static_cast<float>(form.limit));
        const VF low = hn::Neg(limit);
        p = hn::IfThenElse(hn::Lt(p, low), low, hn::IfThenElse(hn::Gt(p, limit), limit, p));
        p = hn::Add(p, hn::Set(d, static_cast<float>(form.up_offset)));
      }
      a = hn::Mul(a, p);
    }
    hn::StoreU(a, d, dst);
  };
  int64_t i = 0;
  auto at = [&](const float* row) { return row != nullptr ? row + i : nullptr; };
  for (; i + L <= n; i += L) step(gate + i, at(gate_bias), at(proj), at(proj_bias), out + i);
  if (i < n) {
    const size_t rest = static_cast<size_t>(n - i);
    constexpr size_t kMax = HWY_MAX_BYTES / sizeof(float);
    HWY_ALIGN float copies[4][kMax] = {};
    auto padded = [&](int which, const float* row) -> const float* {
      if (row == nullptr) return nullptr;
      std::memcpy(copies[which], row + i, rest * sizeof(float));
      return copies[which];
    };
    step(padded(0, gate), padded(1, gate_bias), padded(2, proj), padded(3, proj_bias), copies[0]);
    std::memcpy(out + i, copies[0], rest * sizeof(float));
  }
}

// act(x) and act'(x) together (gated_linear_unit_vjp), sharing the exponential: the
// derivatives of activation.h's activation_derivative in the forms above.
template <Activation kAct>
HWY_INLINE VF ActWithDerivative(DF d, VF x, VF& derivative) {
  const VF one = hn::Set(d, 1.0f);
  if constexpr (kAct == Activation::kNone) {
    derivative = one;
    return x;
  } else if constexpr (kAct == Activation::kSilu) {
    const VF s = ActSigmoid(d, x);
    const VF a = hn::Mul(x, s);
    derivative = hn::MulAdd(a, hn::Sub(one, s), s);  // s + x s (1 - s)
    return a;
  } else if constexpr (kAct == Activation::kGelu) {
    const VF cdf = hn::Mul(hn::Set(d, 0.5f),
                           hn::Add(one, ActErf(d, hn::Mul(x, hn::Set(d, 0.70710678118654752f)))));
    const VF pdf = hn::Mul(hn::Set(d, 0.3989422804014327f),
                           ExpNonPositive(d, hn::Mul(hn::Set(d, -0.5f), hn::Mul(x, x))));
    derivative = hn::MulAdd(x, pdf, cdf);  // cdf + x pdf
    return hn::Mul(x, cdf);
  } else if constexpr (kAct == Activation::kGeluTanh) {
    // With S = sigmoid(2 y), y = c (x + b x^3): 1 + tanh y = 2 S and 1 - tanh^2 y = 4 S (1 - S),
    // so act' = S + 2 c x S (1 - S) (1 + 3 b x^2).
    const VF x2 = hn::Mul(x, x);
    const VF two_y = hn::Mul(hn::Set(d, 2.0f * 0.7978845608028654f),
                             hn::MulAdd(hn::Mul(hn::Set(d, 0.044715f), x2), x, x));
    const VF S = ActSigmoid(d, two_y);
    const VF slope = hn::Mul(hn::Mul(hn::Set(d, 2.0f * 0.7978845608028654f), x),
                             hn::MulAdd(hn::Set(d, 3.0f * 0.044715f), x2, one));
    derivative = hn::MulAdd(hn::Mul(S, hn::Sub(one, S)), slope, S);
    return hn::Mul(x, S);
  } else if constexpr (kAct == Activation::kSigmoid) {
    const VF s = ActSigmoid(d, x);
    derivative = hn::Mul(s, hn::Sub(one, s));
    return s;
  } else {
    const auto positive = hn::Gt(x, hn::Zero(d));
    derivative = hn::IfThenElseZero(positive, one);
    return hn::Max(x, hn::Zero(d));
  }
}

// In place over the recomputed gate g and projection p: gate <- dout p act'(g), proj <- dout
// act(g). The tail goes through zero-padded copies, as GluRowT's.
template <Activation kAct>
void GluVjpRowT(const float* dout, float* gate, float* proj, int64_t n) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  auto step = [&](const float* dp, float* gp, float* pp, bool aligned) {
    const VF g = aligned ? hn::Load(d, gp) : hn::LoadU(d, gp);
    const VF p = aligned ? hn::Load(d, pp) : hn::LoadU(d, pp);
    const VF dv = aligned ? hn::Load(d, dp) : hn::LoadU(d, dp);
    VF da;
    const VF a = ActWithDerivative<kAct>(d, g, da);
    const VF dg = hn::Mul(hn::Mul(dv, p), da), dpv = hn::Mul(dv, a);
    if (aligned) {
      hn::Store(dg, d, gp);
      hn::Store(dpv, d, pp);
    } else {
      hn::StoreU(dg, d, gp);
      hn::StoreU(dpv, d, pp);
    }
  };
  int64_t i = 0;
  for (; i + L <= n; i += L) step(dout + i, gate + i, proj + i, false);
  if (i < n) {
    const size_t rest = static_cast<size_t>(n - i);
    HWY_ALIGN float g[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN float p[HWY_MAX_BYTES / sizeof(float)] = {};
    HWY_ALIGN float dv[HWY_MAX_BYTES / sizeof(float)] = {};
    std::memcpy(g, gate + i, rest * sizeof(float));
    std::memcpy(p, proj + i, rest * sizeof(float));
    std::memcpy(dv, dout + i, rest * sizeof(float));
    step(dv, g, p, true);
    std::memcpy(gate + i, g, rest * sizeof(float));
    std::memcpy(proj + i, p, rest * sizeof(float));
  }
}

void GluVjpRow(Activation activation, const float* dout, float* gate, float* proj, int64_t n) {
  switch (activation) {
    case Activation::kNone:
      return GluVjpRowT<Activation::kNone>(dout, gate, proj, n);
    case Activation::kSilu:
      return GluVjpRowT<Activation::kSilu>(dout, gate, proj, n);
    case Activation::kGelu:
      return GluVjpRowT<Activation::kGelu>(dout, gate, proj, n);
    case Activation::kGeluTanh:
      return GluVjpRowT<Activation::kGeluTanh>(dout, gate, proj, n);
    case Activation::kSigmoid:
      return GluVjpRowT<Activation::kSigmoid>(dout, gate, proj, n);
    case Activation::kRelu:
      return GluVjpRowT<Activation::kRelu>(dout, gate, proj, n);
  }
}

void GluRow(Activation activation, GluForm form, const float* gate, const float* gate_bias,
            const float* proj, const float* proj_bias, float* out, int64_t n) {
  if (form.clamped != nullptr) {
    return GluRowT<Activation::kSilu, GluKind::kClamped>(gate, gate_bias, proj, proj_bias, out, n,
                                                         *form.clamped);
  }
  if (form.situ != nullptr) {
    return GluRowT<Activation::kSilu, GluKind::kSitu>(gate, gate_bias, proj, proj_bias, out, n, {},
                                                      *form.situ);
  }
  switch (activation) {
    case Activation::kNone:
      return GluRowT<Activation::kNone>(gate, gate_bias, proj, proj_bias, out, n);
    case Activation::kSilu:
      return GluRowT<Activation::kSilu>(gate, gate_bias, proj, proj_bias, out, n);
    case Activation::kGelu:
      return GluRowT<Activation::kGelu>(gate, gate_bias, proj, proj_bias, out, n);
    case Activation::kGeluTanh:
      return GluRowT<Activation::kGeluTanh>(gate, gate_bias, proj, proj_bias, out, n);
    case Activation::kSigmoid:
      return GluRowT<Activation::kSigmoid>(gate, gate_bias, proj, proj_bias, out, n);
    case Activation::kRelu:
      return GluRowT<Activation::kRelu>(gate, gate_bias, proj, proj_bias, out, n);
  }
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(GluRow);
HWY_EXPORT(GluVjpRow);

void cpu_activation_row(Activation activation, float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GluRow)(activation, GluForm{}, x, nullptr, nullptr, nullptr, x, n);
}

void cpu_glu_row(Activation activation, const float* gate, const float* proj, float* out,
                 int64_t n) {
  HWY_DYNAMIC_DISPATCH(GluRow)(activation, GluForm{}, gate, nullptr, proj, nullptr, out, n);
}

void cpu_biased_glu_row(Activation activation, GluForm form, const float* gate,
                        const float* gate_bias, const float* proj, const float* proj_bias,
                        float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GluRow)(activation, form, gate, gate_bias, proj, proj_bias, out, n);
}

void cpu_glu_vjp_row(Activation activation, const float* dout, float* gate, float* proj,
                     int64_t n) {
  HWY_DYNAMIC_DISPATCH(GluVjpRow)(activation, dout, gate, proj, n);
}

}  // namespace tokamax
#endif  // HWY_ONCE
