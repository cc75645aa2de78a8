// Test tensors holding given values, and rows of results read back (hand-checked op tests).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "ops/framework/dtype.h"
#include "ops/framework/tensor.h"

namespace tokamax::testing {

// A host tensor of `dims` holding `values` (row-major) in T's dtype.
template <typename T>
Tensor tensor_of(std::vector<int64_t> dims, const std::vector<T>& values) {
  Tensor t(TensorSpec{DTypeOf<T>::value, std::move(dims)});
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

// Row r of a [rows, width] tensor of T.
template <typename T>
std::vector<T> row_of(const Tensor& t, int64_t r, int64_t width) {
  return std::vector<T>(t.data<T>() + r * width, t.data<T>() + (r + 1) * width);
}

}  // namespace tokamax::testing
