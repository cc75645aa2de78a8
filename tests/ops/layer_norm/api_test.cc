// Tests for tokamax::layer_norm: dispatch, options, errors.
#include "ops/layer_norm/api.h"

#include <catch2/catch.hpp>
#include <string>

#include "ops/framework/errors.h"
#include "tests/ops/layer_norm/layer_norm_test_util.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

TEST_CASE("tokamax::layer_norm runs auto and named implementations within the bound",
          "[layer_norm]") {
  const LayerNormOp& op = layer_norm_op();
  for (const json& args_json :
       {json{{"x", "bf16[12,40,24]"}, {"axis", 1}, {"scale", "f32[40]"}, {"offset", "f32[40]"}},
        json{{"x", "f32[30,64]"}, {"scale", "f32[64]"}, {"subtract_mean", false}}}) {
    CAPTURE(args_json.dump());
    const BoundArgs args = op.bind(args_json);
    const LayerNormProblem p = LayerNormProblem::from(args);
    const TensorMap inputs = op.make_inputs(args, 2);
    const Tensor* scale = &inputs.at("scale");
    const Tensor* offset = p.has_offset ? &inputs.at("offset") : nullptr;
    for (const std::string impl : {"auto", "cpu", "reference"}) {
      CAPTURE(impl);
      LayerNormOptions options;
      options.implementation = impl;
      options.axis = p.axis - static_cast<int>(p.dims.size());  // negative spelling
      options.subtract_mean = p.subtract_mean;
      const Tensor out = layer_norm(inputs.at("x"), scale, offset, options);
      CHECK(out.spec() == inputs.at("x").spec());
      CHECK(judge(compare_all(args, inputs, out)) == Disposition::kPassed);
    }
  }
}

TEST_CASE("tokamax::layer_norm reports bad arguments and unsupported implementations",
          "[layer_norm]") {
  const Tensor x(TensorSpec{DType::kF32, {4, 8}});
  const Tensor wrong(TensorSpec{DType::kF32, {4}});
  try {
    layer_norm(x, &wrong, nullptr);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "scale");
  }
  LayerNormOptions axis;
  axis.axis = 2;
  try {
    layer_norm(x, nullptr, nullptr, axis);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "axis");
  }
  LayerNormOptions rms_onednn;
  rms_onednn.implementation = "onednn";
  rms_onednn.subtract_mean = false;
  CHECK_THROWS_AS(layer_norm(x, nullptr, nullptr, rms_onednn), NotImplemented);
}
