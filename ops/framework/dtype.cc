// Element types: names, sizes, round-to-nearest-even conversions for bf16 and f16.
#include "ops/framework/dtype.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "ops/framework/errors.h"

namespace tokamax {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return "f64";
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kBool:
      return "bool";
    case DType::kI8:
      return "i8";
    case DType::kF8E4M3:
      return "f8e4m3";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "f64" || name == "float64") return DType::kF64;
  if (name == "f32" || name == "float32") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "f16" || name == "float16") return DType::kF16;
  if (name == "i32" || name == "int32") return DType::kI32;
  if (name == "bool") return DType::kBool;
  if (name == "i8" || name == "int8") return DType::kI8;
  if (name == "f8e4m3" || name == "float8_e4m3fn") return DType::kF8E4M3;
  throw InvalidArgument("unknown dtype '" + std::string(name) +
                        "' (expected one of f64, f32, bf16, f16, i32, bool, i8, f8e4m3)");
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kBool:
    case DType::kI8:
    case DType::kF8E4M3:
      return 1;
  }
  return 0;
}

bool is_floating(DType dtype) {
  return dtype == DType::kF64 || dtype == DType::kF32 || dtype == DType::kBF16 ||
         dtype == DType::kF16;
}

bool is_kernel_float(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}

bool is_quantized(DType dtype) { return dtype == DType::kI8 || dtype == DType::kF8E4M3; }

double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::kF64:
      return std::ldexp(1.0, -53);
    case DType::kF32:
      return std::ldexp(1.0, -24);
    case DType::kBF16:
      return std::ldexp(1.0, -8);
    case DType::kF16:
      return std::ldexp(1.0, -11);
    case DType::kF8E4M3:
      return std::ldexp(1.0, -4);
    case DType::kI32:
    case DType::kBool:
    case DType::kI8:
      return 0.0;
  }
  return 0.0;
}

double subnormal_floor(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return std::ldexp(1.0, -25);
    case DType::kBF16:
      return std::ldexp(1.0, -134);
    case DType::kF32:
      return std::ldexp(1.0, -150);
    case DType::kF64:
      return std::ldexp(1.0, -1075);
    case DType::kF8E4M3:
      return std::ldexp(1.0, -10);
    case DType::kI32:
    case DType::kBool:
    case DType::kI8:
      return 0.0;
  }
  return 0.0;
}

float f8e4m3_to_float(f8e4m3 value) {
  const int sign = value.bits >> 7, exponent = (value.bits >> 3) & 0xF, mantissa = value.bits & 7;
  if (exponent == 0xF && mantissa == 7) return std::numeric_limits<float>::quiet_NaN();
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -9)
                              : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  return sign ? -magnitude : magnitude;
}

f8e4m3 double_to_f8e4m3(double value) {
  if (std::isnan(value)) return f8e4m3{0x7F};
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const double a = std::fabs(value);
  // The codes 0x00..0x7E are the finite magnitudes in increasing order: the nearest one, ties to
  // the even code (an even mantissa), by bisection over them.
  int lo = 0, hi = 0x7E;
  if (a >= 464.0) return f8e4m3{static_cast<uint8_t>(sign | 0x7F)};  // past 448 + half a step
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (f8e4m3_to_float(f8e4m3{static_cast<uint8_t>(mid)}) <= a)
      lo = mid;
    else
      hi = mid;
  }
  const double below = f8e4m3_to_float(f8e4m3{static_cast<uint8_t>(lo)});
  const double above = f8e4m3_to_float(f8e4m3{static_cast<uint8_t>(hi)});
  int code = lo;
  if (a - below > above - a || (a - below == above - a && (lo & 1))) code = hi;
  if (a <= below) code = lo;
  return f8e4m3{static_cast<uint8_t>(sign | code)};
}

int8_t double_to_i8(double value) {
  if (std::isnan(value)) return 0;
  return static_cast<int8_t>(std::clamp(std::nearbyint(value), -128.0, 127.0));
}

bf16 float_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) {
    // Keep the sign, force a quiet NaN: truncation alone could turn a NaN into infinity.
    return bf16{static_cast<uint16_t>((bits >> 16) | 0x0040u)};
  }
  // Round to nearest even on the 16 dropped bits; a carry into the exponent correctly rounds the
  // largest finite values up to infinity.
  const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return bf16{static_cast<uint16_t>((bits + rounding_bias) >> 16)};
}

f16 float_to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return f16{static_cast<uint16_t>(sign | 0x7E00u)};  // NaN
  if (abs_bits >= 0x477FF000u) {
    // >= 65520 rounds to infinity (65504 is the largest finite f16; half an ulp above it ties to
    // the even neighbour, which is infinity).
    return f16{static_cast<uint16_t>(sign | 0x7C00u)};
  }
  if (abs_bits < 0x38800000u) {
    // Subnormal f16 (|x| < 2^-14): the value in units of 2^-24, rounded to nearest even. Adding
    // 0.5 in float cannot be used (double rounding), so round with integer arithmetic.
    if (abs_bits < 0x33000000u) return f16{sign};  // below half the smallest subnormal
    const uint32_t exponent = abs_bits >> 23;      // biased, 102..112
    const uint32_t mantissa = (abs_bits & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24: mantissa >> shift = units of 2^-24
    uint32_t result = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (remainder > half || (remainder == half && (result & 1u))) ++result;
    return f16{static_cast<uint16_t>(sign | result)};
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  const uint32_t rebased = abs_bits - (112u << 23);
  const uint32_t rounded = rebased + 0x0FFFu + ((rebased >> 13) & 1u);
  return f16{static_cast<uint16_t>(sign | (rounded >> 13))};
}

float f16_to_float(f16 value) {
  const uint32_t sign = static_cast<uint32_t>(value.bits & 0x8000u) << 16;
  const uint32_t exponent = (value.bits >> 10) & 0x1Fu;
  const uint32_t mantissa = value.bits & 0x3FFu;
  if (exponent == 0x1F) {
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));  // inf / NaN
  }
  if (exponent == 0) {
    // Zero or subnormal: exact in float as mantissa * 2^-24.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

namespace {

// Rounds to float toward zero and sets the last mantissa bit when inexact ("round to odd").
// A later round-to-nearest-even to a format with at least two fewer mantissa bits then equals
// the correctly rounded result of the original double (Boldo & Melquiond).
float round_to_odd(double value) {
  const float nearest = static_cast<float>(value);
  if (std::isnan(value) || static_cast<double>(nearest) == value) return nearest;
  float truncated = nearest;
  if (std::fabs(static_cast<double>(nearest)) > std::fabs(value)) {
    truncated = std::nextafter(nearest, 0.0f);
  }
  return std::bit_cast<float>(std::bit_cast<uint32_t>(truncated) | 1u);
}

}  // namespace

bf16 double_to_bf16(double value) { return float_to_bf16(round_to_odd(value)); }
f16 double_to_f16(double value) { return float_to_f16(round_to_odd(value)); }

}  // namespace tokamax
