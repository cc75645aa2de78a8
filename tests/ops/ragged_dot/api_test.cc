// Tests for tokamax::ragged_dot: auto dispatch, fallback on NotImplemented, named failures.
#include "ops/ragged_dot/api.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
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
  CHECK(out.dtype() == DType::kBF16);  // the inputs' type by default, as upstream
  RaggedDotOptions f32_out;
  f32_out.preferred_element_type = DType::kF32;
  const Tensor out_f32 = ragged_dot(lhs, rhs, sizes({4, 4}), f32_out);
  CHECK(out_f32.dtype() == DType::kF32);
}

TEST_CASE("ragged_dot API takes the epilogue arguments", "[ragged_dot][api]") {
  // An expert-parallel shard owning groups 1 and 2 of 4, with a bias and the fused SwiGLU.
  const BoundArgs args = ragged_dot_op().bind({{"lhs", "f32[30,8]"},
                                               {"rhs", "f32[2,8,12]"},
                                               {"rhs_bias", "f32[2,12]"},
                                               {"group_offset", 1},
                                               {"group_sizes", {5, 9, 7, 4}},
                                               {"fuse_gateup_activation", "swigluoai"}});
  const TensorMap inputs = ragged_dot_op().make_inputs(args, 2);
  RaggedDotOptions options;
  options.group_offset = 1;
  options.rhs_bias = &inputs.at("rhs_bias");
  options.fuse_gateup_activation = GateUp::kSwigluOai;
  for (const char* impl : {"cpu", "reference"}) {
    options.implementation = impl;
    const Tensor out =
        ragged_dot(inputs.at("lhs"), inputs.at("rhs"), inputs.at("group_sizes"), options);
    REQUIRE(out.spec().to_string() == "f32[30,6]");
    std::vector<int64_t> index(180);
    for (int64_t i = 0; i < 180; ++i) index[i] = i;
    const Comparison c = compare_to_oracle(out, ragged_dot_op().oracle(args, inputs, "out", index),
                                           ragged_dot_op().error_model(args));
    CHECK(judge(c) == Disposition::kPassed);
    CHECK(out.get(0) == 0.0);  // group 0 is another shard's
  }
  options.implementation = "openblas";
  CHECK_THROWS_WITH(
      ragged_dot(inputs.at("lhs"), inputs.at("rhs"), inputs.at("group_sizes"), options),
      Catch::Contains("rhs_bias"));
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

TEST_CASE("ragged_dot silu_and_mul_with_clamp clamps the gate at 10 and up to [-10, 10]",
          "[ragged_dot]") {
  // One row, one group: gate and up columns 20 / -30 (clamped), 0.5 / 3 (inside the limit).
  Tensor lhs(TensorSpec{DType::kF32, {1, 1}});
  lhs.data<float>()[0] = 1.0f;
  Tensor rhs(TensorSpec{DType::kF32, {1, 1, 4}});
  const float columns[] = {20.0f, 0.5f, -30.0f, 3.0f};  // [gate | up]
  std::copy(columns, columns + 4, rhs.data<float>());
  Tensor sizes(TensorSpec{DType::kI32, {1}});
  sizes.data<int32_t>()[0] = 1;
  RaggedDotOptions options;
  options.fuse_gateup_activation = GateUp::kSiluClamped;
  for (const char* impl : {"cpu", "reference"}) {
    CAPTURE(impl);
    options.implementation = impl;
    const Tensor out = ragged_dot(lhs, rhs, sizes, options);
    REQUIRE(out.spec().to_string() == "f32[1,2]");
    const double silu10 = 10.0 / (1.0 + std::exp(-10.0)), silu_half = 0.5 / (1.0 + std::exp(-0.5));
    CHECK(out.get(0) == Approx(silu10 * -10.0).epsilon(1e-6));
    CHECK(out.get(1) == Approx(silu_half * 3.0).epsilon(1e-6));
  }
  // gelu_tanh is upstream's other spelling of gelu (jax.nn.gelu's default approximation).
  const BoundArgs spelled = ragged_dot_op().bind(
      {{"lhs", "f32[4,2]"}, {"rhs", "f32[1,2,4]"}, {"fuse_gateup_activation", "gelu_tanh"}});
  CHECK(spelled.option("fuse_gateup_activation") == "gelu");
}

TEST_CASE("ragged_dot situ:<beta>:<linear_beta> binds canonically and refuses bad parameters",
          "[ragged_dot]") {
  auto bind_as = [](const char* form) {
    return ragged_dot_op().bind(
        {{"lhs", "f32[4,2]"}, {"rhs", "f32[1,2,4]"}, {"fuse_gateup_activation", form}});
  };
  CHECK(bind_as("situ:4.0:none").option("fuse_gateup_activation") == "situ:4:none");
  CHECK(bind_as("situ:4:25.0").option("fuse_gateup_activation") == "situ:4:25");
  const RaggedDotProblem p = RaggedDotProblem::from(bind_as("situ:0.5:3"));
  CHECK(p.gate_up == GateUp::kSitu);
  CHECK(p.situ.beta == 0.5);
  CHECK(p.situ.linear_beta == 3.0);
  for (const char* bad : {"situ", "situ:", "situ:4", "situ:0:none", "situ:-1:none", "situ:x:none",
                          "situ:4:0", "situ:4:nan", "situ:4:none:1", "situ:inf:none",
                          "situ:1e39:none", "situ:1:1e39", "situ:1e-46:none"}) {
    CAPTURE(bad);
    try {
      bind_as(bad);
      FAIL("accepted");
    } catch (const InvalidArgument& e) {
      CHECK(e.field() == "fuse_gateup_activation");
    }
  }
  // The API's options spell it the same way.
  RaggedDotOptions options;
  options.fuse_gateup_activation = GateUp::kSitu;
  options.situ = {.beta = 4.0, .linear_beta = 0.0};
  CHECK(gate_up_spelling(options.fuse_gateup_activation, options.situ) == "situ:4:none");
}
