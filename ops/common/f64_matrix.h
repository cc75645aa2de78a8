// Tensors -> the K-contiguous float64 operands of f64_dot_rows (ops/common/f64_dot.h): strided
// 2-D views of any dtype, gathered, transposed and widened once, threaded.
//
// Dimensions.
//   R, C   rows and columns of the copy (C is the contraction extent K of the operand)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/common/f64_dot.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// A matrix inside a tensor: element (i, j) is element offset + i * row_stride + j * col_stride
// of the tensor's flat storage. A transposed view swaps the strides.
struct StridedView {
  int64_t offset = 0;
  int64_t row_stride = 0;
  int64_t col_stride = 1;
};

// An owned, dense row-major f64 matrix [R, C].
struct F64Matrix {
  std::vector<double> data;
  int64_t rows = 0;
  int64_t cols = 0;
  double* row(int64_t i) { return data.data() + i * cols; }
  const double* row(int64_t i) const { return data.data() + i * cols; }
  // As the operand of f64_dot_rows: R rows of depth C.
  F64Rows rows_view() const { return {data.data(), rows, cols, cols}; }
};

// Rows 0..R-1 (or the rows listed in `row_index`, R = its size) and columns 0..C-1 of `view`
// as f64. Any dtype of `t` (its values, as Tensor::get gives them); host memory only.
F64Matrix to_f64(const Tensor& t, const StridedView& view, int64_t rows, int64_t cols,
                 std::span<const int64_t> row_index = {});

// |x| of every element (for the operand of a contraction whose magnitude is its value).
F64Matrix abs_of(F64Matrix m);

}  // namespace tokamax
