// Tests for the oracles' f64 operands: strided, transposed and gathered views of every dtype,
// element for element against Tensor::get, across the copy's row and column blocks.
#include "ops/common/f64_matrix.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "ops/framework/random.h"

using namespace tokamax;

TEST_CASE("to_f64 copies strided, transposed and gathered views of any dtype", "[f64_dot]") {
  for (const DType dtype : {DType::kF64, DType::kF32, DType::kBF16, DType::kF16, DType::kI8,
                            DType::kF8E4M3, DType::kI32, DType::kBool}) {
    CAPTURE(dtype_name(dtype));
    // [3, 70, 45]: past the 32-element blocks and the 64-row tasks of the copy.
    Tensor t(TensorSpec{dtype, {3, 70, 45}});
    const uint64_t stream = stream_id("f64_matrix_test");
    for (int64_t e = 0; e < t.num_elements(); ++e) {
      t.set(e, dtype == DType::kBool ? (e % 3 == 0)
                                     : std::round(40.0 * uniform01(1, stream, e)) - 20.0);
    }
    // Batch 1 as rows: [70, 45]; transposed: [45, 70]; gathered rows of the transpose.
    const StridedView rows{70 * 45, 45, 1}, columns{70 * 45, 1, 45};
    const F64Matrix a = to_f64(t, rows, 70, 45);
    const F64Matrix b = to_f64(t, columns, 45, 70);
    const std::vector<int64_t> pick = {44, 0, 7, 7, 31};
    const F64Matrix c = to_f64(t, columns, 0, 70, pick);
    REQUIRE(a.rows == 70);
    REQUIRE(a.cols == 45);
    REQUIRE(b.rows == 45);
    REQUIRE(c.rows == 5);
    for (int64_t i = 0; i < 70; ++i) {
      for (int64_t j = 0; j < 45; ++j) {
        const double want = t.get(70 * 45 + i * 45 + j);
        REQUIRE(a.row(i)[j] == want);
        REQUIRE(b.row(j)[i] == want);
      }
    }
    for (size_t r = 0; r < pick.size(); ++r) {
      for (int64_t i = 0; i < 70; ++i) REQUIRE(c.row(r)[i] == t.get(70 * 45 + i * 45 + pick[r]));
    }
    const F64Matrix m = abs_of(a);
    for (size_t e = 0; e < m.data.size(); ++e) REQUIRE(m.data[e] == std::fabs(a.data[e]));
    const F64Rows view = a.rows_view();
    CHECK(view.rows == 70);
    CHECK(view.depth == 45);
    CHECK(view.row(3) == a.row(3));
  }
}
