// Tests for dtype names and the bf16/f16 conversions (rounding, specials).
#include "ops/framework/dtype.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "ops/framework/errors.h"
#include "ops/framework/tensor.h"

using namespace tokamax;

TEST_CASE("dtype names round-trip and reject unknown names", "[dtype]") {
  for (DType d : {DType::kF64, DType::kF32, DType::kBF16, DType::kF16, DType::kI32}) {
    CHECK(parse_dtype(dtype_name(d)) == d);
  }
  CHECK(parse_dtype("bfloat16") == DType::kBF16);
  CHECK_THROWS_AS(parse_dtype("f8"), InvalidArgument);
  CHECK(dtype_size(DType::kBF16) == 2);
  CHECK(dtype_size(DType::kF64) == 8);
}

TEST_CASE("bf16 conversion is exact where representable and rounds to nearest even", "[dtype]") {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 3.0f, 1.0f / 128, 65536.0f}) {
    CHECK(bf16_to_float(float_to_bf16(v)) == v);
  }
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1.0).
  CHECK(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
  CHECK(bf16_to_float(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))) ==
        1.0f + std::ldexp(1.0f, -6));
  // Just above halfway rounds up.
  CHECK(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))) ==
        1.0f + std::ldexp(1.0f, -7));
  CHECK(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // The largest float rounds up to infinity in bf16.
  CHECK(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max()))));
}

TEST_CASE("f16 conversion handles normals, subnormals, overflow and NaN", "[dtype]") {
  for (float v :
       {0.0f, 1.0f, -1.5f, 65504.0f, 0.000061035156f /*2^-14*/, 0.000000059604645f /*2^-24*/}) {
    CHECK(f16_to_float(float_to_f16(v)) == v);
  }
  CHECK(float_to_f16(1.0f).bits == 0x3C00);
  CHECK(float_to_f16(-2.0f).bits == 0xC000);
  CHECK(float_to_f16(65504.0f).bits == 0x7BFF);
  // 1 + 2^-11 ties to even (1.0); 1 + 3*2^-11 ties to 1 + 2^-9.
  CHECK(f16_to_float(float_to_f16(1.0f + std::ldexp(1.0f, -11))) == 1.0f);
  CHECK(f16_to_float(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11))) ==
        1.0f + std::ldexp(1.0f, -9));
  // Overflow: 65520 and above round to infinity, 65519 to the largest finite.
  CHECK(float_to_f16(65520.0f).bits == 0x7C00);
  CHECK(float_to_f16(65519.0f).bits == 0x7BFF);
  // Subnormals: 2^-25 ties to even (zero), 3*2^-25 ties to 2*2^-24.
  CHECK(float_to_f16(std::ldexp(1.0f, -25)).bits == 0x0000);
  CHECK(float_to_f16(3 * std::ldexp(1.0f, -25)).bits == 0x0002);
  CHECK(float_to_f16(std::ldexp(1.0f, -24) * 1.4f).bits == 0x0001);
  CHECK(std::isnan(f16_to_float(float_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(f16_to_float(f16{0x7C00})));
  // Every f16 bit pattern survives f16 -> float -> f16 (NaNs stay NaN).
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float v = f16_to_float(f16{static_cast<uint16_t>(bits)});
    if (std::isnan(v)) continue;
    REQUIRE(float_to_f16(v).bits == bits);
  }
}

TEST_CASE("double to bf16/f16 rounds once, not twice through float", "[dtype]") {
  // 1 + 2^-8 + 2^-30 is just above the bf16 tie between 1 and 1 + 2^-7, so it rounds up; going
  // through float first would land exactly on the tie (the 2^-30 is lost) and round to even, 1.
  const double above_tie = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  CHECK(bf16_to_float(float_to_bf16(static_cast<float>(above_tie))) == 1.0f);
  CHECK(bf16_to_float(double_to_bf16(above_tie)) == 1.0f + std::ldexp(1.0f, -7));
  const double f16_above_tie = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  CHECK(f16_to_float(double_to_f16(f16_above_tie)) == 1.0f + std::ldexp(1.0f, -10));
  CHECK(bf16_to_float(double_to_bf16(-2.5)) == -2.5f);
  CHECK(std::isinf(bf16_to_float(double_to_bf16(1e300))));
  CHECK(std::isnan(f16_to_float(double_to_f16(std::nan("")))));
  CHECK(f16_to_float(double_to_f16(1e-300)) == 0.0f);
}

TEST_CASE("bool tensors store one byte per element and read back as 0 or 1", "[dtype]") {
  CHECK(parse_dtype("bool") == DType::kBool);
  CHECK(dtype_name(DType::kBool) == "bool");
  CHECK(dtype_size(DType::kBool) == 1);
  CHECK_FALSE(is_floating(DType::kBool));
  const TensorSpec spec = parse_tensor_spec("bool[2,3]");
  CHECK(spec.size_bytes() == 6);
  Tensor mask(spec);
  mask.set(1, 1.0);
  mask.set(4, 0.25);  // any nonzero value is true
  CHECK(mask.get(0) == 0.0);
  CHECK(mask.get(1) == 1.0);
  CHECK(mask.get(4) == 1.0);
  CHECK(mask.data<bool>()[4]);
  CHECK_FALSE(mask.data<bool>()[5]);
}

TEST_CASE("i8 and f8e4m3 parse, size and convert like numpy / ml_dtypes", "[dtype]") {
  CHECK(parse_dtype("i8") == DType::kI8);
  CHECK(parse_dtype("int8") == DType::kI8);
  CHECK(parse_dtype("float8_e4m3fn") == DType::kF8E4M3);
  CHECK(dtype_size(DType::kI8) == 1);
  CHECK(dtype_size(DType::kF8E4M3) == 1);
  CHECK(is_quantized(DType::kI8));
  CHECK(is_quantized(DType::kF8E4M3));
  CHECK_FALSE(is_floating(DType::kF8E4M3));
  CHECK_FALSE(is_quantized(DType::kBF16));
  // i8: round half to even, saturated.
  CHECK(double_to_i8(2.5) == 2);
  CHECK(double_to_i8(-3.5) == -4);
  CHECK(double_to_i8(300.0) == 127);
  CHECK(double_to_i8(-1e9) == -128);
  // e4m3fn: every code round-trips; the extremes and the subnormals; ties to even.
  int finite = 0;
  for (int code = 0; code < 256; ++code) {
    const f8e4m3 value{static_cast<uint8_t>(code)};
    const float x = f8e4m3_to_float(value);
    if ((code & 0x7F) == 0x7F) {
      CHECK(std::isnan(x));
      continue;
    }
    ++finite;
    CHECK(double_to_f8e4m3(x).bits == code);
  }
  CHECK(finite == 254);
  CHECK(f8e4m3_to_float(f8e4m3{0x7E}) == 448.0f);
  CHECK(f8e4m3_to_float(f8e4m3{0x01}) == std::ldexp(1.0f, -9));
  CHECK(f8e4m3_to_float(f8e4m3{0x08}) == std::ldexp(1.0f, -6));  // the smallest normal
  CHECK(f8e4m3_to_float(f8e4m3{0xC0}) == -2.0f);
  CHECK(f8e4m3_to_float(double_to_f8e4m3(1.0625)) == 1.0f);    // tie between 1 and 1.125: even
  CHECK(f8e4m3_to_float(double_to_f8e4m3(1.1875)) == 1.25f);   // tie between 1.125 and 1.25
  CHECK(f8e4m3_to_float(double_to_f8e4m3(460.0)) == 448.0f);
  CHECK(std::isnan(f8e4m3_to_float(double_to_f8e4m3(464.0))));
  CHECK(std::isnan(f8e4m3_to_float(double_to_f8e4m3(std::nan("")))));
  CHECK(std::signbit(f8e4m3_to_float(double_to_f8e4m3(-0.0))));
}
