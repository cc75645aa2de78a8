// dispatch_float / dispatch_any: run a generic lambda with the C++ element type of a dtype.
#pragma once

#include <cstdint>
#include <string>

#include "ops/framework/dtype.h"
#include "ops/framework/errors.h"

namespace tokamax {

template <typename Fn>
decltype(auto) dispatch_float(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF64:
      return fn(double{});
    case DType::kF32:
      return fn(float{});
    case DType::kBF16:
      return fn(bf16{});
    case DType::kF16:
      return fn(f16{});
    default:
      throw NotImplemented("dtype " + std::string(dtype_name(dtype)) + " is not a float type");
  }
}

// Every dtype, the integer and quantized ones included.
template <typename Fn>
void dispatch_any(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF64:
      return fn(double{});
    case DType::kF32:
      return fn(float{});
    case DType::kBF16:
      return fn(bf16{});
    case DType::kF16:
      return fn(f16{});
    case DType::kI32:
      return fn(int32_t{});
    case DType::kBool:
      return fn(bool{});
    case DType::kI8:
      return fn(int8_t{});
    case DType::kF8E4M3:
      return fn(f8e4m3{});
  }
}

}  // namespace tokamax
