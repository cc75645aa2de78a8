// Tests of gated_delta_rule's conv row (conv_rows.cc): the vectorized chain against its scalar
// form element by element on every SIMD target, and NaNs kept through the bf16 roundings.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/framework/dtype.h"
#include "ops/gated_delta_rule/base.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;

namespace {

constexpr int64_t W = 4, C = 37;  // 37 channels: whole vectors and a tail on every target

// Taps [W, C], stream rows [W, C] holding bf16 values, a bias [C].
struct ConvRowData {
  std::vector<float> w, in, bias;
  ConvRowData() : w(W * C), in(W * C), bias(C) {
    for (int64_t e = 0; e < W * C; ++e) {
      w[e] = 0.37f * std::sin(0.9f * static_cast<float>(e)) + 0.05f;
      in[e] = bf16_to_float(float_to_bf16(2.5f * std::cos(0.31f * static_cast<float>(e))));
    }
    for (int64_t c = 0; c < C; ++c) bias[c] = 0.02f * static_cast<float>(c % 11) - 0.1f;
  }
};

float f32_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace

TEST_CASE("gdn_conv_row computes every channel as its one-channel calls do", "[gated_delta_rule]") {
  const ConvRowData x;
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      for (const bool boundary : {false, true}) {
        CAPTURE(dtype_name(dtype), boundary);
        std::vector<float> y(C), one(1);
        gdn_conv_row(dtype, x.w.data(), W, x.in.data(), x.bias.data(), boundary, y.data(), C, C);
        for (int64_t c = 0; c < C; ++c) {
          // One channel at a time takes the scalar chain (std::exp; the vectors take Highway's
          // exp, within an ulp of f32: at most one bf16 ulp apart after the roundings).
          gdn_conv_row(dtype, x.w.data() + c, W, x.in.data() + c, x.bias.data() + c, boundary,
                       one.data(), 1, C);
          CAPTURE(c);
          CHECK(y[c] == Approx(one[0]).epsilon(dtype == DType::kBF16 ? 1.0 / 128 : 1e-6));
        }
      }
    }
  });
}

TEST_CASE("gdn_conv_row keeps NaN sums NaN through the bf16 roundings", "[gated_delta_rule]") {
  ConvRowData x;
  // A tap whose NaN payload fills the low 16 bits (rounding it as a number carries into the
  // sign: -0), a NaN input, a NaN bias, and -inf (silu(-inf) = -inf * 0: the default NaN).
  x.w[0 * C + 3] = f32_bits(0x7FFFFFFFu);
  x.in[1 * C + 20] = std::numeric_limits<float>::quiet_NaN();
  x.bias[33] = f32_bits(0xFFFFFFFFu);
  x.in[2 * C + 8] = std::numeric_limits<float>::infinity();  // times a negative tap
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const bool boundary : {false, true}) {
      CAPTURE(boundary);
      std::vector<float> y(C);
      gdn_conv_row(DType::kBF16, x.w.data(), W, x.in.data(), x.bias.data(), boundary, y.data(), C,
                   C);
      for (const int64_t c : {3, 20, 33, 8}) {
        CAPTURE(c);
        CHECK(std::isnan(y[c]));
      }
      CHECK(std::isfinite(y[4]));
    }
  });
}
