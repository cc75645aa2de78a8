// Tests of the CPU row selection engine against a stable sort, for both rules, every score dtype
// and both methods on every SIMD target, on rows built to be hard: long ties, sorted rows, rows
// with nothing eligible, and a bound loose enough to leave hundreds of candidates.
#include "ops/common/row_select.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;

namespace {

// The expected columns by a stable sort of the eligible columns on the keys' order.
std::vector<int32_t> expected(const RowSelectProblem& p, const std::vector<float>& scores) {
  std::vector<int32_t> out(static_cast<size_t>(p.b * p.k), -1);
  for (int64_t r = 0; r < p.b; ++r) {
    std::vector<int32_t> columns;
    for (int64_t c = 0; c < row_select_length(p.row_lengths, r, p.n); ++c) {
      if (row_select_key(scores[r * p.n + c], p.rule, p.floor) != kRowSelectIneligible) {
        columns.push_back(static_cast<int32_t>(c));
      }
    }
    std::stable_sort(columns.begin(), columns.end(), [&](int32_t a, int32_t b) {
      return row_select_key(scores[r * p.n + a], p.rule, p.floor) >
             row_select_key(scores[r * p.n + b], p.rule, p.floor);
    });
    for (int64_t j = 0; j < p.k && j < static_cast<int64_t>(columns.size()); ++j) {
      out[r * p.k + j] = columns[j];
    }
  }
  return out;
}

// Hard rows: random on a coarse grid, one tie across the row, ascending, descending, nothing
// eligible (-inf or NaN), zeros of both signs; then random again.
std::vector<float> hard_rows(int64_t b, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> s(static_cast<size_t>(b * n));
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      float v = std::round(normal(rng) * 8.0f) / 8.0f;
      switch (r % 7) {
        case 1:
          v = 1.0f;
          break;
        case 2:
          v = static_cast<float>(c);
          break;
        case 3:
          v = static_cast<float>(n - c);
          break;
        case 4:
          v = c % 2 == 0 ? -inf : std::nanf("");
          break;
        case 5:
          v = c % 2 == 0 ? -0.0f : 0.0f;
          break;
        default:
          if (rng() % 32 == 0) v = -inf;
          if (rng() % 64 == 0) v = std::nanf("");
      }
      s[r * n + c] = v;
    }
  }
  return s;
}

}  // namespace

TEST_CASE("row selection equals a stable sort for both rules, methods and targets",
          "[row_select]") {
  struct Shape {
    int64_t b, n, k;
  };
  const std::vector<Shape> shapes = {{14, 300, 8}, {14, 37, 5}, {7, 1000, 70}, {7, 64, 64}};
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const Shape& shape : shapes) {
      const std::vector<float> scores = hard_rows(shape.b, shape.n, 17);
      std::vector<int32_t> lengths(static_cast<size_t>(shape.b));
      for (int64_t r = 0; r < shape.b; ++r) {
        lengths[r] = static_cast<int32_t>((r * 37) % (shape.n + 9)) - 4;
      }
      for (const RowSelectRule rule : {RowSelectRule::kAboveNegInf, RowSelectRule::kClampToFloor}) {
        RowSelectProblem p{
            .b = shape.b, .n = shape.n, .k = shape.k, .rule = rule, .floor = -3.0e38f};
        if (rule == RowSelectRule::kAboveNegInf) p.row_lengths = lengths.data();
        const std::vector<int32_t> want = expected(p, scores);
        for (const bool radix : {false, true}) {
          for (const int rows_per_task : {1, 5}) {
            CAPTURE(shape.n, shape.k, static_cast<int>(rule), radix, rows_per_task);
            std::vector<int32_t> got(want.size(), 12345);
            row_select_cpu(
                p, {.rows_per_task = rows_per_task, .num_threads = 0, .radix_select = radix},
                scores.data(), got.data());
            CHECK(got == want);
          }
        }
      }
    }
  });
}

TEST_CASE("row selection reads bf16 and f16 scores as their f32 values", "[row_select]") {
  const int64_t b = 6, n = 100, k = 7;
  const std::vector<float> f32 = hard_rows(b, n, 5);
  std::vector<bf16> b16(f32.size());
  std::vector<f16> h16(f32.size());
  std::vector<float> b16_values(f32.size()), h16_values(f32.size());
  for (size_t i = 0; i < f32.size(); ++i) {
    b16[i] = from_double<bf16>(f32[i]);
    h16[i] = from_double<f16>(f32[i]);
    b16_values[i] = to_float(b16[i]);
    h16_values[i] = to_float(h16[i]);
  }
  for (const bool radix : {false, true}) {
    RowSelectProblem p{.b = b,
                       .n = n,
                       .k = k,
                       .dtype = DType::kBF16,
                       .rule = RowSelectRule::kClampToFloor,
                       .floor = -3.0e38f};
    const RowSelectConfig config{.rows_per_task = 2, .num_threads = 0, .radix_select = radix};
    std::vector<int32_t> got(static_cast<size_t>(b * k));
    row_select_cpu(p, config, b16.data(), got.data());
    CHECK(got == expected(p, b16_values));
    p.dtype = DType::kF16;
    row_select_cpu(p, config, h16.data(), got.data());
    CHECK(got == expected(p, h16_values));
  }
}
