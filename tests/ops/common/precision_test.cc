// Tests for the `precision` argument's names, plans, pieces and operand expansion.
#include "ops/common/precision.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/framework/random.h"

using namespace tokamax;

namespace {

constexpr DotPrecision kPresets[] = {
    DotPrecision::kF16F16F32,     DotPrecision::kBf16Bf16F32,   DotPrecision::kBf16Bf16F32X3,
    DotPrecision::kBf16Bf16F32X6, DotPrecision::kBf16Bf16F32X9, DotPrecision::kTf32Tf32F32,
    DotPrecision::kTf32Tf32F32X3,
};

// Values over `binades` binades around 1, both signs.
std::vector<float> sample_values(int count, uint64_t seed, int binades = 40) {
  std::vector<float> values;
  for (int i = 0; i < count; ++i) {
    const double u = uniform01(seed, 1, i), e = uniform01(seed, 2, i);
    const int exponent = static_cast<int>(e * binades) - binades / 2;
    values.push_back(static_cast<float>((u - 0.5) * std::ldexp(1.0, exponent)));
  }
  return values;
}

}  // namespace

TEST_CASE("precision names round-trip, upstream's spellings parse, unknown ones name the field",
          "[precision]") {
  for (const char* name : {"default", "high", "highest", "f16_f16_f32", "bf16_bf16_f32",
                           "bf16_bf16_f32_x3", "bf16_bf16_f32_x6", "bf16_bf16_f32_x9",
                           "tf32_tf32_f32", "tf32_tf32_f32_x3", "f32_f32_f32"}) {
    CHECK(precision_name(parse_precision(name)) == name);
  }
  CHECK(parse_precision("BF16_BF16_F32_X3") == DotPrecision::kBf16Bf16F32X3);
  CHECK(parse_precision("fastest") == DotPrecision::kDefault);
  CHECK(parse_precision("float32") == DotPrecision::kHighest);
  try {
    parse_precision("bf16_x3");
    FAIL("no error");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "precision");
    CHECK(std::string(e.what()).find("bf16_bf16_f32_x3") != std::string::npos);
  }
}

TEST_CASE("precision plans keep operands as given where nothing rounds", "[precision]") {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kI8}) {
    for (DotPrecision p : {DotPrecision::kDefault, DotPrecision::kHigh, DotPrecision::kHighest}) {
      CHECK(plan_precision(p, dtype, dtype).identity());
      CHECK(plan_precision(p, dtype, dtype).operand_roundoff == 0.0);
    }
  }
  // Operands the preset's type already holds: bf16 in every bf16 preset, 16-bit floats in tf32.
  for (DotPrecision p : {DotPrecision::kBf16Bf16F32, DotPrecision::kBf16Bf16F32X3,
                         DotPrecision::kBf16Bf16F32X6, DotPrecision::kTf32Tf32F32X3}) {
    CHECK(plan_precision(p, DType::kBF16, DType::kBF16).identity());
  }
  CHECK(plan_precision(DotPrecision::kTf32Tf32F32, DType::kF16, DType::kBF16).identity());
  CHECK(plan_precision(DotPrecision::kF32F32F32, DType::kF32, DType::kF32).identity());
  // f16 cannot hold bf16's range: rounded.
  CHECK(!plan_precision(DotPrecision::kF16F16F32, DType::kBF16, DType::kBF16).identity());
}

TEST_CASE("precision plans sum the preset's piece products, fewer where an operand is narrow",
          "[precision]") {
  const PrecisionPlan x3 = plan_precision(DotPrecision::kBf16Bf16F32X3, DType::kF32, DType::kF32);
  CHECK(x3.passes() == 3);
  CHECK(x3.piece_dtype == DType::kBF16);
  CHECK(plan_precision(DotPrecision::kBf16Bf16F32X6, DType::kF32, DType::kF32).passes() == 6);
  CHECK(plan_precision(DotPrecision::kBf16Bf16F32X9, DType::kF32, DType::kF32).passes() == 9);
  // A bf16 lhs has one piece: a0 b0 + a0 b1 only.
  const PrecisionPlan mixed =
      plan_precision(DotPrecision::kBf16Bf16F32X3, DType::kBF16, DType::kF32);
  CHECK(mixed.pairs == std::vector<std::pair<int, int>>{{0, 0}, {0, 1}});
  CHECK(!mixed.round_lhs);
  CHECK(mixed.expands(true));  // repeated for the rhs's two pieces
  const PrecisionPlan one = plan_precision(DotPrecision::kBf16Bf16F32, DType::kBF16, DType::kF32);
  CHECK(!one.expands(true));
  CHECK(one.operand_dtype(true, DType::kBF16) == DType::kBF16);
  CHECK(one.expands(false));
  const PrecisionPlan f16 = plan_precision(DotPrecision::kTf32Tf32F32, DType::kF16, DType::kF32);
  CHECK(f16.operand_dtype(true, DType::kF16) == DType::kF16);  // kept: no f16 -> f32 copy
  CHECK(f16.operand_dtype(false, DType::kF32) == DType::kF32);
  CHECK(mixed.round_rhs);
  // An f16 operand needs two bf16 pieces; _x9 then keeps the pairs of pieces 0-1 only.
  CHECK(plan_precision(DotPrecision::kBf16Bf16F32X9, DType::kF16, DType::kF16).passes() == 4);
  const PrecisionPlan tf32 = plan_precision(DotPrecision::kTf32Tf32F32, DType::kF32, DType::kF32);
  CHECK(tf32.piece_dtype == DType::kF32);
  CHECK(tf32.passes() == 1);
  for (DType bad : {DType::kF64, DType::kI8, DType::kF8E4M3}) {
    CHECK_THROWS_AS(plan_precision(DotPrecision::kBf16Bf16F32, DType::kF32, bad), InvalidArgument);
  }
}

TEST_CASE("precision pieces add up to the value within the preset's rounding", "[precision]") {
  const PrecisionPlan bf16 = plan_precision(DotPrecision::kBf16Bf16F32X9, DType::kF32, DType::kF32);
  const PrecisionPlan tf32 = plan_precision(DotPrecision::kTf32Tf32F32X3, DType::kF32, DType::kF32);
  for (float x : sample_values(2000, 3)) {
    CAPTURE(x);
    const double p0 = precision_piece(bf16, x, 0), p1 = precision_piece(bf16, x, 1),
                 p2 = precision_piece(bf16, x, 2);
    // Each piece is a bf16 value; one piece is within 2^-8, two within 2^-16, three exact.
    REQUIRE(static_cast<float>(p0) == bf16_to_float(float_to_bf16(static_cast<float>(p0))));
    REQUIRE(static_cast<float>(p1) == bf16_to_float(float_to_bf16(static_cast<float>(p1))));
    REQUIRE(std::fabs(x - p0) <= 0x1p-8 * std::fabs(x));
    REQUIRE(std::fabs(x - p0 - p1) <= 0x1p-16 * std::fabs(x));
    REQUIRE(p0 + p1 + p2 == static_cast<double>(x));
    const double t0 = precision_piece(tf32, x, 0), t1 = precision_piece(tf32, x, 1);
    REQUIRE(std::fabs(x - t0) <= 0x1p-11 * std::fabs(x));
    REQUIRE(std::fabs(x - t0 - t1) <= 0x1p-22 * std::fabs(x));
  }
  // Non-finite values stay in piece 0; the others are zero.
  CHECK(std::isinf(precision_piece(bf16, INFINITY, 0)));
  CHECK(precision_piece(bf16, INFINITY, 1) == 0.0f);
  CHECK(std::isnan(precision_piece(bf16, NAN, 0)));
}

TEST_CASE("expand_operand lays the pieces side by side along the contraction", "[precision]") {
  const PrecisionPlan plan = plan_precision(DotPrecision::kBf16Bf16F32X3, DType::kF32, DType::kF32);
  Tensor source(TensorSpec{DType::kF32, {2, 5, 3}});
  const std::vector<float> values = sample_values(30, 7);
  for (int64_t i = 0; i < 30; ++i) source.set(i, values[i]);
  for (bool is_lhs : {true, false}) {
    const Tensor out = expand_operand(source, 1, plan, is_lhs);
    REQUIRE(out.dtype() == DType::kBF16);
    REQUIRE(out.dims() == std::vector<int64_t>{2, 15, 3});
    for (int64_t o = 0; o < 2; ++o) {
      for (int64_t j = 0; j < 3; ++j) {
        const int piece = is_lhs ? plan.pairs[j].first : plan.pairs[j].second;
        for (int64_t k = 0; k < 5; ++k) {
          for (int64_t i = 0; i < 3; ++i) {
            const float x = values[(o * 5 + k) * 3 + i];
            REQUIRE(out.get((o * 15 + j * 5 + k) * 3 + i) == precision_piece(plan, x, piece));
          }
        }
      }
    }
  }
  // Outer indices not read stay zero.
  const Tensor skipped = expand_operand(source, 1, plan, false, {false, true});
  for (int64_t i = 0; i < 45; ++i) REQUIRE(skipped.get(i) == 0.0);
  CHECK(skipped.get(45 + 3) == precision_piece(plan, values[15 + 3], plan.pairs[0].second));
  CHECK_THROWS_AS(expand_operand(source, 1, plan, false, {true}), InvalidArgument);
  CHECK_THROWS_AS(expand_operand(source, 3, plan, true), InvalidArgument);
}

TEST_CASE(
    "products of expanded operands stay within each preset's operand roundoff, and "
    "bf16_bf16_f32 exceeds the f32 bound",
    "[precision]") {
  const int64_t K = 512;
  Tensor a(TensorSpec{DType::kF32, {1, K}}), b(TensorSpec{DType::kF32, {K, 1}});
  // Within f16's range, which f16_f16_f32 needs.
  const std::vector<float> va = sample_values(K, 11, 16), vb = sample_values(K, 12, 16);
  double exact = 0.0, magnitude = 0.0;
  for (int64_t k = 0; k < K; ++k) {
    a.set(k, va[k]);
    b.set(k, vb[k]);
    exact += static_cast<double>(va[k]) * vb[k];
    magnitude += std::fabs(static_cast<double>(va[k]) * vb[k]);
  }
  for (DotPrecision precision : kPresets) {
    CAPTURE(precision_name(precision));
    const PrecisionPlan plan = plan_precision(precision, DType::kF32, DType::kF32);
    const Tensor ea = expand_operand(a, 1, plan, true), eb = expand_operand(b, 0, plan, false);
    double sum = 0.0;  // in f64: the pieces' error alone
    for (int64_t k = 0; k < plan.passes() * K; ++k) sum += ea.get(k) * eb.get(k);
    CHECK(std::fabs(sum - exact) <= plan.operand_roundoff * magnitude);
    if (precision == DotPrecision::kBf16Bf16F32) {
      // K f32 roundings (highest's bound) are far tighter than one bf16 rounding per operand.
      CHECK(std::fabs(sum - exact) > K * 0x1p-24 * magnitude);
    }
  }
}
