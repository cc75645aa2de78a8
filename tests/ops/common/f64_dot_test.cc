// Tests for the oracles' float64 dot rows: every point and every product against plain loops,
// over tile tails, dense and sparse tiles, K blocks, each SIMD target; argument errors.
#include "ops/common/f64_dot.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "tests/simd_targets.h"

using namespace tokamax;

namespace {

// Rows of N(0, 1) values with a row stride past the depth (padding that must not be read as
// data: it holds NaN).
struct Operand {
  std::vector<double> data;
  F64Rows rows;
  Operand(int64_t n, int64_t depth, uint64_t seed) {
    const int64_t ld = depth + 3;
    data.assign(static_cast<size_t>(std::max<int64_t>(n * ld, 1)), std::nan(""));
    const uint64_t stream = stream_id("f64_dot_test");
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < depth; ++k) {
        data[i * ld + k] = 2.0 * uniform01(seed, stream, static_cast<uint64_t>(i * ld + k)) - 1.0;
      }
    }
    rows = {data.data(), n, depth, ld};
  }
};

void plain(const F64Rows& a, const F64Rows& b, int64_t i, int64_t j, double& value,
           double& magnitude) {
  value = magnitude = 0.0;
  for (int64_t k = 0; k < a.depth; ++k) {
    const double t = a.row(i)[k] * b.row(j)[k];
    value += t;
    magnitude += std::fabs(t);
  }
}

// Every product, and the points of a dense block plus a sparse scatter (in a shuffled order,
// one point repeated), against the plain loop.
void check_shape(int64_t Ra, int64_t Rb, int64_t K) {
  CAPTURE(Ra, Rb, K);
  const Operand a(Ra, K, 1), b(Rb, K, 2);
  std::vector<double> value(static_cast<size_t>(Ra * Rb)), magnitude(value.size());
  f64_dot_rows_all(a.rows, b.rows, value.data(), magnitude.data(), Rb);
  for (int64_t i = 0; i < Ra; ++i) {
    for (int64_t j = 0; j < Rb; ++j) {
      double v = 0.0, m = 0.0;
      plain(a.rows, b.rows, i, j, v, m);
      REQUIRE(std::fabs(value[i * Rb + j] - v) <= 1e-13 * m);
      REQUIRE(std::fabs(magnitude[i * Rb + j] - m) <= 1e-13 * m);
    }
  }
  std::vector<DotPoint> points;
  for (int64_t i = 0; i < std::min<int64_t>(Ra, 20); ++i) {
    for (int64_t j = 0; j < Rb; ++j) points.push_back({i, j});
  }
  for (int64_t s = 0; s < 200; ++s) points.push_back({(s * 37) % Ra, (s * 101 + 7) % Rb});
  points.push_back(points.front());
  for (size_t s = 0; s + 1 < points.size(); s += 2) std::swap(points[s], points[s + 1]);
  std::vector<double> pv(points.size()), pm(points.size()), values_only(points.size());
  f64_dot_rows(a.rows, b.rows, points, pv, pm);
  f64_dot_rows(a.rows, b.rows, points, values_only, {});
  for (size_t s = 0; s < points.size(); ++s) {
    double v = 0.0, m = 0.0;
    plain(a.rows, b.rows, points[s].a, points[s].b, v, m);
    CAPTURE(s, points[s].a, points[s].b);
    REQUIRE(std::fabs(pv[s] - v) <= 1e-13 * m);
    REQUIRE(std::fabs(pm[s] - m) <= 1e-13 * m);
    REQUIRE(std::fabs(values_only[s] - v) <= 1e-13 * m);
  }
}

}  // namespace

TEST_CASE("f64_dot_rows matches plain loops over tile tails and K blocks", "[f64_dot]") {
  check_shape(1, 1, 1);
  check_shape(7, 5, 3);
  check_shape(50, 17, 129);    // two K blocks, a partial strip, a partial panel
  check_shape(100, 300, 260);  // several row tiles, two column tiles, three K blocks
  check_shape(13, 40, 1000);
}

TEST_CASE("f64_dot_rows matches plain loops on every SIMD target", "[f64_dot]") {
  testing::for_each_forced_target({HWY_AVX2, HWY_SCALAR}, [](int64_t) {
    check_shape(29, 33, 131);
    check_shape(3, 2, 5);
  });
}

TEST_CASE("f64_dot_rows with depth 0 gives zeros", "[f64_dot]") {
  const Operand a(4, 0, 1), b(3, 0, 2);
  std::vector<double> value(12, 1.0), magnitude(12, 1.0);
  f64_dot_rows_all(a.rows, b.rows, value.data(), magnitude.data(), 3);
  for (double v : value) CHECK(v == 0.0);
  for (double m : magnitude) CHECK(m == 0.0);
  const std::vector<DotPoint> points = {{0, 0}, {3, 2}};
  std::vector<double> pv(2, 1.0), pm(2, 1.0);
  f64_dot_rows(a.rows, b.rows, points, pv, pm);
  CHECK(pv == std::vector<double>{0.0, 0.0});
  CHECK(pm == std::vector<double>{0.0, 0.0});
}

TEST_CASE("f64_dot_rows rejects mismatched depths, points out of range and short outputs",
          "[f64_dot]") {
  const Operand a(4, 6, 1), b(3, 6, 2), c(3, 5, 3);
  std::vector<double> value(2), magnitude(2);
  const std::vector<DotPoint> inside = {{0, 0}, {3, 2}};
  CHECK_THROWS_AS(f64_dot_rows(a.rows, c.rows, inside, value, magnitude), InvalidArgument);
  const std::vector<DotPoint> outside = {{0, 0}, {4, 0}};
  CHECK_THROWS_AS(f64_dot_rows(a.rows, b.rows, outside, value, magnitude), InvalidArgument);
  std::vector<double> short_value(1);
  CHECK_THROWS_AS(f64_dot_rows(a.rows, b.rows, inside, short_value, {}), InvalidArgument);
  CHECK_NOTHROW(f64_dot_rows(a.rows, b.rows, inside, value, {}));
}
