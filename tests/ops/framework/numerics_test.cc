// Tests for the oracle comparison, error bounds, dispositions and sampling.
#include "ops/framework/numerics.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <set>

#include "ops/framework/random.h"
#include "ops/gated_linear_unit/api.h"

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

TEST_CASE("a NaN or infinite oracle value is matched exactly", "[numerics]") {
  const ErrorModel model{};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const OracleSample oracle = sample_of({std::nan(""), -static_cast<double>(inf), 1.0}, {0, 0, 0});
  CHECK(judge(compare_to_oracle(f32_tensor({nan, -inf, 1.0f}), oracle, model)) ==
        Disposition::kPassed);
  // A number where the oracle has NaN, the other infinity, NaN for an infinity: all fail.
  for (const std::vector<float>& wrong :
       std::vector<std::vector<float>>{{0.5f, -inf, 1.0f}, {nan, inf, 1.0f}, {nan, nan, 1.0f}}) {
    const Comparison c = compare_to_oracle(f32_tensor(wrong), oracle, model);
    CHECK(judge(c) == Disposition::kFailed);
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

TEST_CASE("sample_indices picks the first distinct draws, with a bitmap or a hash set",
          "[numerics]") {
  // The definition: 0, total - 1, then draws in order, repeats skipped, until there are enough.
  auto by_definition = [](int64_t total, int64_t max_samples, uint64_t seed) {
    std::set<int64_t> chosen = {0, total - 1};
    const uint64_t stream = stream_id("oracle_sample");
    for (uint64_t d = 0; static_cast<int64_t>(chosen.size()) < max_samples; ++d) {
      chosen.insert(static_cast<int64_t>(uniform01(seed, stream, d) * static_cast<double>(total)));
    }
    return std::vector<int64_t>(chosen.begin(), chosen.end());
  };
  // Dense samples (the bitmap: many repeated draws) and sparse ones (the hash set).
  for (const auto& [total, samples] : {std::pair<int64_t, int64_t>{1000, 900},
                                       {1000, 20},
                                       {64 * 1000, 1000},
                                       {1000000, 300},
                                       {3, 2}}) {
    CAPTURE(total, samples);
    CHECK(sample_indices(total, samples, 5) == by_definition(total, samples, 5));
  }
}

TEST_CASE("sample_oracle checks every output within the budget, else at most kMaxOracleSamples",
          "[numerics]") {
  // 6M outputs of 2 multiply-adds each (K = 1): the full oracle costs 1.2e7.
  const Op& op = gated_linear_unit_op();
  const BoundArgs args = op.bind({{"x", "f32[3000,1]"}, {"weights", "f32[1,2,2000]"}});
  const TensorMap inputs = op.make_inputs(args, 1);
  CHECK(sample_oracle(op, args, inputs, 1.2e7, 0).at("out").index.size() == 6000000);
  CHECK(sample_oracle(op, args, inputs, 2e5, 0).at("out").index.size() == 100000);
  // Affordable: 5e6 outputs, more than the cap and fewer than all.
  CHECK(sample_oracle(op, args, inputs, 1e7, 0).at("out").index.size() ==
        static_cast<size_t>(kMaxOracleSamples));
}
