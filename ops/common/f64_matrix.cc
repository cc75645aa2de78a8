// Tensors -> f64 operands: a typed, cache-blocked, threaded copy of a strided 2-D view.
//
// Dimensions: as f64_matrix.h (R, C).
#include "ops/common/f64_matrix.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/cpu/thread_pool.h"
#include "ops/framework/dtype.h"
#include "ops/framework/dtype_dispatch.h"

namespace tokamax {
namespace {

// Rows of one task, and the square block a transposing copy walks (32 x 32 source elements:
// the column stride's cache lines are reused across the block's rows instead of refetched).
constexpr int64_t kRowsPerTask = 64;
constexpr int64_t kBlock = 32;

template <typename T>
void copy_rows(const T* src, const StridedView& view, int64_t r0, int64_t r1, int64_t cols,
               std::span<const int64_t> row_index, F64Matrix& out) {
  for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
    const int64_t c1 = std::min(cols, c0 + kBlock);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = row_index.empty() ? r : row_index[r];
      const T* at = src + view.offset + i * view.row_stride;
      double* dst = out.row(r);
      for (int64_t c = c0; c < c1; ++c) dst[c] = to_double(at[c * view.col_stride]);
    }
  }
}

}  // namespace

F64Matrix to_f64(const Tensor& t, const StridedView& view, int64_t rows, int64_t cols,
                 std::span<const int64_t> row_index) {
  F64Matrix out;
  out.rows = row_index.empty() ? rows : static_cast<int64_t>(row_index.size());
  out.cols = cols;
  out.data.resize(static_cast<size_t>(out.rows * out.cols));
  if (out.rows == 0 || cols == 0) return out;
  dispatch_any(t.dtype(), [&](auto type) {
    using T = decltype(type);
    const T* src = t.data<T>();
    // Row blocks in blocks of 32 rows within a task, so a transposed view's blocks are square.
    const int64_t tasks = (out.rows + kRowsPerTask - 1) / kRowsPerTask;
    cpu::parallel_for(tasks, 0, [&](int64_t task, int) {
      const int64_t end = std::min(out.rows, (task + 1) * kRowsPerTask);
      for (int64_t r0 = task * kRowsPerTask; r0 < end; r0 += kBlock) {
        copy_rows(src, view, r0, std::min(end, r0 + kBlock), cols, row_index, out);
      }
    });
  });
  return out;
}

F64Matrix abs_of(F64Matrix m) {
  for (double& x : m.data) x = std::fabs(x);
  return m;
}

}  // namespace tokamax
