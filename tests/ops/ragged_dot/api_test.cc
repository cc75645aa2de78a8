// Tests for tokamax::ragged_dot: auto dispatch, fallback on NotImplemented, named failures.
#include "ops/ragged_dot/api.h"

#include <catch2/catch.hpp>

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"
#include "tests/ops/framework/fake_impls.h"

using namespace tokamax;
using namespace tokamax::testing;

namespace {

Tensor filled(TensorSpec spec, double scale) {
  Tensor t(std::move(spec));
  for (int64_t i = 0; i < t.num_elements(); ++i) t.set(i, scale * static_cast<double>((i % 7) - 3));
  return t;
}

// Spelled out rather than designated initializers: GCC 12's -Wextra flags omitted members.
RaggedDotOptions with_impl(const std::string& impl) {
  RaggedDotOptions options;
  options.implementation = impl;
  return options;
}

Tensor sizes(std::vector<int32_t> values) {
  Tensor t(TensorSpec{DType::kI32, {static_cast<int64_t>(values.size())}});
  for (size_t i = 0; i < values.size(); ++i) t.data<int32_t>()[i] = values[i];
  return t;
}

}  // namespace

TEST_CASE("ragged_dot auto and named implementations agree on a hand-checked case",
          "[ragged_dot][api]") {
  // lhs = [[1,2],[3,4],[5,6]], group 0 = row 0 with rhs[0] = I, group 1 = row 1 with
  // rhs[1] = [[0,1],[1,0]] (swap), row 2 past the group sum -> zeros.
  Tensor lhs(TensorSpec{DType::kF32, {3, 2}});
  for (int i = 0; i < 6; ++i) lhs.data<float>()[i] = static_cast<float>(i + 1);
  Tensor rhs(TensorSpec{DType::kF32, {2, 2, 2}});
  const float rhs_values[] = {1, 0, 0, 1, 0, 1, 1, 0};
  for (int i = 0; i < 8; ++i) rhs.data<float>()[i] = rhs_values[i];
  const float expected[] = {1, 2, 4, 3, 0, 0};
  for (const char* impl : {"auto", "cpu", "reference"}) {
    INFO(impl);
    const Tensor out = ragged_dot(lhs, rhs, sizes({1, 1}), with_impl(impl));
    REQUIRE(out.spec().to_string() == "f32[3,2]");
    for (int i = 0; i < 6; ++i) CHECK(out.data<float>()[i] == expected[i]);
  }
}

TEST_CASE("ragged_dot validates arguments by name", "[ragged_dot][api]") {
  const Tensor lhs = filled(TensorSpec{DType::kBF16, {8, 4}}, 0.5);
  const Tensor rhs = filled(TensorSpec{DType::kBF16, {2, 4, 3}}, 0.25);
  CHECK_THROWS_WITH(ragged_dot(lhs, rhs, sizes({5, 5})),
                    Catch::Contains("group_sizes sum to 10") && Catch::Contains("M=8"));
  CHECK_THROWS_WITH(ragged_dot(lhs, filled(TensorSpec{DType::kBF16, {2, 5, 3}}, 1), sizes({1, 1})),
                    Catch::Contains("K=4"));
  CHECK_THROWS_WITH(ragged_dot(lhs, rhs, sizes({1, 1, 1})), Catch::Contains("G=2"));
  CHECK_THROWS_WITH(ragged_dot(lhs, rhs, sizes({-1, 1})), Catch::Contains("group_sizes[0]"));
  CHECK_THROWS_WITH(ragged_dot(lhs, rhs, sizes({1, 1}), with_impl("gpu")),
                    Catch::Contains("unknown implementation 'gpu'"));
  RaggedDotOptions auto_with_config;
  auto_with_config.config = nlohmann::json::object();
  CHECK_THROWS_AS(ragged_dot(lhs, rhs, sizes({1, 1}), auto_with_config), InvalidArgument);
  const Tensor out = ragged_dot(lhs, rhs, sizes({4, 4}));
  CHECK(out.dtype() == DType::kF32);  // bf16 inputs -> f32 by default
  RaggedDotOptions bf16_out;
  bf16_out.preferred_element_type = DType::kBF16;
  const Tensor out_bf16 = ragged_dot(lhs, rhs, sizes({4, 4}), bf16_out);
  CHECK(out_bf16.dtype() == DType::kBF16);
}

TEST_CASE("auto dispatch falls back on NotImplemented and a named implementation fails loudly",
          "[ragged_dot][api]") {
  const FakeRaggedDot no_device("no_device", /*supported=*/false);
  const FakeRaggedDot rejecting("rejecting", true, /*accepts=*/false);
  const FakeRaggedDot working("working");
  const FakeRaggedDotOp op({&no_device, &rejecting, &working});
  const BoundArgs args = small_ragged_dot_args();
  const TensorMap inputs = op.make_inputs(args, 0);
  TensorMap outputs = op.allocate_outputs(args);
  const DispatchResult result = dispatch(op, args, "auto", std::nullopt, inputs, outputs);
  CHECK(result.impl->name() == "working");
  CHECK(result.config.source == ConfigSource::kHeuristics);
  CHECK_THROWS_WITH(dispatch(op, args, "rejecting", std::nullopt, inputs, outputs),
                    Catch::Contains("rejects every problem"));
  CHECK_THROWS_AS(dispatch(op, args, "no_device", std::nullopt, inputs, outputs), NotImplemented);
  const FakeRaggedDotOp none({&no_device, &rejecting});
  CHECK_THROWS_WITH(dispatch(none, args, "auto", std::nullopt, inputs, outputs),
                    Catch::Contains("no implementation") && Catch::Contains("fake device"));
}
