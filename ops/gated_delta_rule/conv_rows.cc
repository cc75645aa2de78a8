// gated_delta_rule: one token's conv and silu, rounded as upstream (base.h: gdn_conv_row),
// compiled once per SIMD target by Highway.
//
// Dimensions: as base.h; L the f32 lanes of the target.
#include <cmath>
#include <cstdint>

#include "ops/gated_delta_rule/base.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/gated_delta_rule/conv_rows.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>
// The per-target conversions need highway.h first.
#include "ops/common/cpu_convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lane-wise: rounded to bf16 (to nearest even, as float_to_bf16) and widened back when `bf16`,
// else kept in f32. Without float_to_bf16's NaN check: a NaN whose payload fills the low 16 bits
// could round into another value, so ConvRow puts back the NaNs of its sums at the end; a NaN
// born later in the chain (inf - inf, 0 inf) is the default NaN, which rounds to itself.
HWY_INLINE VF Round(DF d, VF x, bool bf16) {
  if (!bf16) return x;
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::BitCast(du, x);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::Add(bits, hn::Add(lsb, hn::Set(du, 0x7FFFu)));
  return hn::BitCast(d, hn::And(rounded, hn::Set(du, 0xFFFF0000u)));
}

// One element's chain, scalar (the tail, and f16 whose steps round through f16).
float conv_element(DType dtype, const float* w, int64_t W, const float* in, int64_t C, float bias,
                   bool boundary, bool has_bias, int64_t c) {
  float acc = boundary ? 0.0f : bias;
  for (int64_t k = 0; k < W; ++k) acc += w[k * C + c] * in[k * C + c];
  float v = round_through(dtype, acc);
  if (boundary && has_bias) v = round_through(dtype, v + bias);
  const float e = round_through(dtype, std::exp(-v));
  const float sig = round_through(dtype, 1.0f / round_through(dtype, 1.0f + e));
  return round_through(dtype, v * sig);
}

// y[c] = silu(conv) of one token's channels [0, n): (bias, unless boundary) + sum_k w[k, c]
// in[k, c] over the W stream rows `in` (row stride C, as w's), rounded to the dtype; at a
// boundary the bias added after that rounding and rounded again; then x logistic(x) with exp,
// 1 + e, the reciprocal and the product each rounded (XLA's bf16 order; f32 rounds nothing).
void ConvRow(DType dtype, const float* w, int64_t W, const float* in, const float* bias,
             bool boundary, bool has_bias, float* y, int64_t n, int64_t C) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const bool bf16 = dtype == DType::kBF16;
  const auto one = hn::Set(d, 1.0f);
  int64_t c = 0;
  if (dtype != DType::kF16) {
    for (; c + L <= n; c += L) {
      const auto b = has_bias ? hn::LoadU(d, bias + c) : hn::Zero(d);
      auto acc = boundary ? hn::Zero(d) : b;
      for (int64_t k = 0; k < W; ++k) {
        acc = hn::MulAdd(hn::LoadU(d, w + k * C + c), hn::LoadU(d, in + k * C + c), acc);
      }
      // The lanes whose sum (with the bias) is NaN: their result is NaN whatever Round makes of
      // it; their v is zeroed, keeping NaN out of Exp (whose portable target converts it to an
      // integer, undefined in C++).
      auto v = Round(d, acc, bf16);
      auto nan = hn::IsNaN(acc);
      if (boundary && has_bias) {
        const auto biased = hn::Add(v, b);
        nan = hn::Or(nan, hn::IsNaN(biased));
        v = Round(d, biased, bf16);
      }
      v = hn::IfThenZeroElse(nan, v);
      const auto e = Round(d, hn::Exp(d, hn::Neg(v)), bf16);
      const auto sig = Round(d, hn::Div(one, Round(d, hn::Add(one, e), bf16)), bf16);
      const auto out = Round(d, hn::Mul(v, sig), bf16);
      hn::StoreU(hn::IfThenElse(nan, hn::NaN(d), out), d, y + c);
    }
  }
  for (; c < n; ++c) {
    y[c] = conv_element(dtype, w, W, in, C, has_bias ? bias[c] : 0.0f, boundary, has_bias, c);
  }
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(ConvRow);

void gdn_conv_row(DType dtype, const float* w, int64_t W, const float* in, const float* bias,
                  bool boundary, float* y, int64_t n, int64_t C) {
  HWY_DYNAMIC_DISPATCH(ConvRow)(dtype, w, W, in, bias, boundary, bias != nullptr, y, n, C);
}

}  // namespace tokamax
#endif  // HWY_ONCE
