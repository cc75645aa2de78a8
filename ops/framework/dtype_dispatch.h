// dispatch_float: runs a generic lambda with the C++ element type of a floating dtype.
#pragma once

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

}  // namespace tokamax
