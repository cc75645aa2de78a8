// Tests for tokamax::gated_linear_unit (dispatch, argument errors) and `tokamax verify` on the
// op's ci_tests catalog.
#include "ops/gated_linear_unit/api.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "ops/framework/errors.h"
#include "tests/test_util.h"

using namespace tokamax;
using namespace tokamax::testing;

namespace {

GatedLinearUnitOptions with(Activation activation, const std::string& impl) {
  GatedLinearUnitOptions options;
  options.activation = activation;
  options.implementation = impl;
  return options;
}

}  // namespace

TEST_CASE("gated_linear_unit auto and named implementations agree on a hand-checked case",
          "[glu][api]") {
  // x [1, 2, 2] = [[1, 2], [-1, 3]]; gate weights = I, projection weights = [[2, 0], [1, 1]].
  Tensor x(TensorSpec{DType::kF32, {1, 2, 2}});
  const float x_values[] = {1, 2, -1, 3};
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = x_values[i];
  Tensor w(TensorSpec{DType::kF32, {2, 2, 2}});
  const float w_values[] = {1, 0, 2, 0, 0, 1, 1, 1};
  for (int i = 0; i < 8; ++i) w.data<float>()[i] = w_values[i];
  // relu(gate) * proj: gate = x, proj = [[4, 2], [1, 3]].
  const float expected[] = {4, 4, 0, 9};
  // The same weights unfused: Wg = I, Wp = [[2, 0], [1, 1]].
  Tensor wg(TensorSpec{DType::kF32, {2, 2}}), wp(TensorSpec{DType::kF32, {2, 2}});
  const float wg_values[] = {1, 0, 0, 1}, wp_values[] = {2, 0, 1, 1};
  for (int i = 0; i < 4; ++i) {
    wg.data<float>()[i] = wg_values[i];
    wp.data<float>()[i] = wp_values[i];
  }
  for (const char* impl : {"auto", "cpu", "reference", "onednn"}) {
    INFO(impl);
    const Tensor out = gated_linear_unit(x, w, with(Activation::kRelu, impl));
    REQUIRE(out.spec().to_string() == "f32[1,2,2]");
    for (int i = 0; i < 4; ++i) CHECK(out.data<float>()[i] == expected[i]);
    const Tensor split = gated_linear_unit(x, wg, wp, with(Activation::kRelu, impl));
    REQUIRE(split.spec().to_string() == "f32[1,2,2]");
    for (int i = 0; i < 4; ++i) CHECK(split.data<float>()[i] == expected[i]);
  }
  // auto falls back to the reference for f64, which the cpu kernel does not run.
  Tensor x64(TensorSpec{DType::kF64, {2, 2}});
  Tensor w64(TensorSpec{DType::kF64, {2, 2, 2}});
  for (int i = 0; i < 4; ++i) x64.set(i, x_values[i]);
  for (int i = 0; i < 8; ++i) w64.set(i, w_values[i]);
  const Tensor out64 = gated_linear_unit(x64, w64, with(Activation::kRelu, "auto"));
  for (int i = 0; i < 4; ++i) CHECK(out64.get(i) == expected[i]);
  CHECK_THROWS_AS(gated_linear_unit(x64, w64, with(Activation::kRelu, "cpu")), NotImplemented);
}

TEST_CASE("gated_linear_unit validates arguments by name", "[glu][api]") {
  const Tensor x(TensorSpec{DType::kBF16, {8, 4}});
  CHECK_THROWS_WITH(gated_linear_unit(x, Tensor(TensorSpec{DType::kBF16, {5, 2, 3}})),
                    Catch::Contains("K=4") && Catch::Contains("K=5"));
  try {
    gated_linear_unit(x, Tensor(TensorSpec{DType::kBF16, {4, 3, 3}}));
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "weights");
  }
}
