// Tests for the oracle comparison, error bounds, dispositions and sampling.
#include "ops/framework/numerics.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

using namespace tokamax;

namespace {

OracleSample sample_of(std::vector<double> values, std::vector<double> magnitudes) {
  OracleSample s;
  for (size_t i = 0; i < values.size(); ++i) s.index.push_back(static_cast<int64_t>(i));
  s.value = std::move(values);
  s.magnitude = std::move(magnitudes);
  return s;
}

Tensor f32_tensor(std::vector<float> values) {
  Tensor t(TensorSpec{DType::kF32, {static_cast<int64_t>(values.size())}});
  for (size_t i = 0; i < values.size(); ++i) t.data<float>()[i] = values[i];
  return t;
}

}  // namespace

TEST_CASE("the error bound grows with the accumulation length and magnitude", "[numerics]") {
  const ErrorModel model{std::ldexp(1.0, -24), 1000.0, std::ldexp(1.0, -24)};
  const double small = error_bound(model, 1.0, 1.0);
  const double large = error_bound(model, 1.0, 100.0);
  CHECK(large > small);
  CHECK(small == Approx(1000 * std::ldexp(1.0, -24) + std::ldexp(1.0, -24)).epsilon(1e-3));
}

TEST_CASE("compare_to_oracle passes within the bound and fails outside it", "[numerics]") {
  const ErrorModel model{std::ldexp(1.0, -24), 16.0, std::ldexp(1.0, -24)};
  const OracleSample oracle = sample_of({1.0, -2.0, 0.0}, {4.0, 8.0, 0.0});
  SECTION("exact output passes") {
    const Comparison c = compare_to_oracle(f32_tensor({1.0f, -2.0f, 0.0f}), oracle, model);
    CHECK(judge(c) == Disposition::kPassed);
    CHECK(c.max_abs_error == 0.0);
    CHECK(c.sampled == 3);
  }
  SECTION("an error of a few ulps passes") {
    const Comparison c =
        compare_to_oracle(f32_tensor({std::nextafter(1.0f, 2.0f), -2.0f, 0.0f}), oracle, model);
    CHECK(judge(c) == Disposition::kPassed);
    CHECK(c.max_abs_error > 0.0);
  }
  SECTION("a wrong value fails and is located") {
    const Comparison c = compare_to_oracle(f32_tensor({1.0f, -2.1f, 0.0f}), oracle, model);
    CHECK(judge(c) == Disposition::kFailed);
    CHECK(c.violations == 1);
    CHECK(c.worst_index == 1);
    CHECK(c.max_rel_error == Approx(0.05).epsilon(1e-3));
    // Relative to the output's scale: 0.1 / max|y| = 0.1 / 2.
    CHECK(c.max_abs_oracle == 2.0);
    CHECK(normwise_rel_error(c) == Approx(0.05).epsilon(1e-3));
    CHECK(c.worst_ratio > 1.0);
  }
  SECTION("a non-zero where the oracle is exactly zero fails") {
    const Comparison c = compare_to_oracle(f32_tensor({1.0f, -2.0f, 1e-30f}), oracle, model);
    CHECK(judge(c) == Disposition::kFailed);
  }
  SECTION("NaN fails") {
    const Comparison c = compare_to_oracle(
        f32_tensor({std::numeric_limits<float>::quiet_NaN(), -2.0f, 0.0f}), oracle, model);
    CHECK(judge(c) == Disposition::kFailed);
    CHECK(c.nonfinite == 1);
  }
}

TEST_CASE("an all-zero oracle is mistrusted", "[numerics]") {
  const ErrorModel model{std::ldexp(1.0, -24), 4.0, std::ldexp(1.0, -24)};
  const Comparison c =
      compare_to_oracle(f32_tensor({0.0f, 0.0f}), sample_of({0.0, 0.0}, {0.0, 0.0}), model);
  CHECK(judge(c) == Disposition::kMistrusted);
}

TEST_CASE("sample_indices is complete when small and deterministic when sampled", "[numerics]") {
  CHECK(sample_indices(5, 10, 0) == std::vector<int64_t>{0, 1, 2, 3, 4});
  const auto a = sample_indices(1000000, 100, 7);
  const auto b = sample_indices(1000000, 100, 7);
  CHECK(a == b);
  CHECK(a.size() == 100);
  CHECK(a.front() == 0);
  CHECK(a.back() == 999999);
  CHECK(std::is_sorted(a.begin(), a.end()));
  CHECK(sample_indices(1000000, 100, 8) != a);
}
