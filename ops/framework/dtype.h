// Element types (f64, f32, bf16, f16, i32, bool, and the quantized i8 and f8e4m3) and the
// conversions of the narrow floats.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tokamax {

enum class DType { kF64, kF32, kBF16, kF16, kI32, kBool, kI8, kF8E4M3 };

// Storage types for the 16-bit floats: plain bit containers so that host tensors are trivially
// copyable; arithmetic happens after conversion to float.
struct bf16 {
  uint16_t bits = 0;
};
struct f16 {
  uint16_t bits = 0;
};
// OCP float8 e4m3 (ml_dtypes' float8_e4m3fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no
// infinities, 0x7f / 0xff are NaN, the largest finite value is 448.
struct f8e4m3 {
  uint8_t bits = 0;
};

std::string_view dtype_name(DType dtype);
// Parses "f32", "bf16", "bool", "i8", "f8e4m3", ...; aliases "float32", "bfloat16", "float16",
// "float64", "int32", "int8", "float8_e4m3fn". bool is stored one byte per element (0 or 1), like
// numpy's.
// Throws InvalidArgument naming the accepted spellings.
DType parse_dtype(std::string_view name);
size_t dtype_size(DType dtype);
// The float types arithmetic runs in (f64, f32, bf16, f16): not the quantized storage types.
bool is_floating(DType dtype);
// f32, bf16 or f16: the float types the CPU kernels read and write (f64 is the references' and
// oracles').
bool is_kernel_float(DType dtype);
// The storage types of quantized weights (i8, f8e4m3), which come with a scale.
bool is_quantized(DType dtype);
// Unit roundoff u = 2^-(mantissa bits + 1): the relative error of one rounding.
double unit_roundoff(DType dtype);
// Half the smallest subnormal of a float dtype (0 for the others): the absolute rounding error
// of values that land in its subnormal range (f16's starts at 2^-14).
double subnormal_floor(DType dtype);

// Round to nearest even; NaN stays NaN (quiet), overflow goes to infinity.
bf16 float_to_bf16(float value);
// Exact (bf16 is the high half of an f32); inline, so that kernels' scalar paths stay calls-free.
inline float bf16_to_float(bf16 value) {
  return std::bit_cast<float>(static_cast<uint32_t>(value.bits) << 16);
}
f16 float_to_f16(float value);
float f16_to_float(f16 value);
// x rounded to bf16 (to nearest even) and widened back, inline: float_to_bf16's result for
// every value but NaN (whose payload may differ; it stays NaN).
inline float round_through_bf16(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return x;
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(bits & 0xFFFF0000u);
}
// x rounded to a kernel float dtype (f32, bf16, f16) and widened back: what storing x in that
// dtype keeps (x itself for f32 and the others).
inline float round_through(DType dtype, float x) {
  if (dtype == DType::kBF16) return round_through_bf16(x);
  if (dtype == DType::kF16) return f16_to_float(float_to_f16(x));
  return x;
}
// Exact; NaN for the NaN codes.
float f8e4m3_to_float(f8e4m3 value);
// Round to nearest even; NaN and values past the largest finite one after rounding (|x| >= 464)
// become NaN, as ml_dtypes' non-saturating cast.
f8e4m3 double_to_f8e4m3(double value);
// Round to nearest even, saturated to [-128, 127] (NaN: 0).
int8_t double_to_i8(double value);
// From double with a single rounding (no double rounding through float): the double is first
// rounded to float with round-to-odd, which float's extra precision makes exact for the final
// round-to-nearest-even step.
bf16 double_to_bf16(double value);
f16 double_to_f16(double value);

// Maps a C++ element type to its DType.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<bf16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<f16> {
  static constexpr DType value = DType::kF16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::kI8;
};
template <>
struct DTypeOf<f8e4m3> {
  static constexpr DType value = DType::kF8E4M3;
};

// Element conversions used by references and kernels.
inline float to_float(float x) { return x; }
inline float to_float(bf16 x) { return bf16_to_float(x); }
inline float to_float(f16 x) { return f16_to_float(x); }
inline double to_double(double x) { return x; }
inline double to_double(float x) { return x; }
inline double to_double(bf16 x) { return bf16_to_float(x); }
inline double to_double(f16 x) { return f16_to_float(x); }
inline double to_double(int32_t x) { return x; }
inline double to_double(bool x) { return x ? 1.0 : 0.0; }
inline double to_double(int8_t x) { return x; }
inline double to_double(f8e4m3 x) { return f8e4m3_to_float(x); }

template <typename T>
T from_double(double x);
template <>
inline double from_double<double>(double x) {
  return x;
}
template <>
inline float from_double<float>(double x) {
  return static_cast<float>(x);
}
template <>
inline bf16 from_double<bf16>(double x) {
  return float_to_bf16(static_cast<float>(x));
}
template <>
inline f16 from_double<f16>(double x) {
  return float_to_f16(static_cast<float>(x));
}
template <>
inline int32_t from_double<int32_t>(double x) {
  return static_cast<int32_t>(x);
}

// Calls fn(T{}) with the C++ type of a floating dtype; throws NotImplemented for others.
template <>
inline bool from_double<bool>(double x) {
  return x != 0.0;
}

template <typename Fn>
decltype(auto) dispatch_float(DType dtype, Fn&& fn);

}  // namespace tokamax

#include "ops/framework/dtype_dispatch.h"
