// Float64 dot products of many row pairs at once, for the oracles: blocked, vectorized, threaded.
//
// Dimensions.
//   K      contraction extent (depth): the length of every row
//   Ra, Rb rows of the two operands; a product (i, j) is row i of a with row j of b
//   S      requested products (points)
//   tm, tn rows of a and of b one tile covers (multiples of the micro-tile's mr and nr)
//
// Every contraction of an oracle is written as "dot rows": C[i, j] = sum_k a[i, k] b[j, k] with
// both operands K-contiguous (b is the transposed right-hand side, B^T), plus its magnitude
// |C|[i, j] = sum_k |a[i, k] b[j, k]|, the scale of an implementation's rounding error. The
// requested points are bucketed into tm x tn tiles; a tile dense in points runs the
// register-blocked micro-kernel over all of its products and picks its points, a sparse one
// takes one vectorized dot product per point. Tiles run on the thread pool.
//
// Summation order. A micro-kernel product sums its K terms in order k = 0..K-1, one FMA per
// term (a plain loop rounds each product, then the sum); a per-point dot keeps one partial sum
// per lane and unroll slot and adds them at the end. Both are float64 sums of the same terms,
// so they differ from the plain loop by at most ~K u_f64 times the magnitude: what the oracle
// tests (tests/ops/common/f64_dot_test.cc and each op's oracle test) compare against.
#pragma once

#include <cstdint>
#include <span>

namespace tokamax {

// How an oracle computes its contractions: kBlocked with f64_dot_rows (what Op::oracle uses),
// kLoop with the plain scalar loop of its definition, kept as the test of the blocked one.
enum class OracleMethod { kBlocked, kLoop };

// Ra (or Rb) K-contiguous rows of doubles: row i at data + i * ld.
struct F64Rows {
  const double* data = nullptr;
  int64_t rows = 0;
  int64_t depth = 0;  // K
  int64_t ld = 0;     // >= depth
  const double* row(int64_t i) const { return data + i * ld; }
};

// One requested product: row `a` of the first operand with row `b` of the second.
struct DotPoint {
  int64_t a = 0;
  int64_t b = 0;
};

// value[s] = sum_k a[p.a, k] b[p.b, k] and magnitude[s] = sum_k |a[p.a, k] b[p.b, k]| for
// every point p = points[s], in any order. `magnitude` may be empty (not computed: for
// operands known to be non-negative the value is the magnitude). Throws InvalidArgument when
// the depths differ, a point is out of range or a span is too short.
void f64_dot_rows(const F64Rows& a, const F64Rows& b, std::span<const DotPoint> points,
                  std::span<double> value, std::span<double> magnitude);

// Every product: value[i * ldc + j] and magnitude[i * ldc + j] for i < Ra, j < Rb (magnitude
// may be null).
void f64_dot_rows_all(const F64Rows& a, const F64Rows& b, double* value, double* magnitude,
                      int64_t ldc);

}  // namespace tokamax
