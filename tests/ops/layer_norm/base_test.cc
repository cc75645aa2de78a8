// Tests for layer_norm's spec: binding and its errors, the reference against the oracle, and
// that the error model rejects a perturbed output.
#include "ops/layer_norm/base.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "cli/toolkit/catalog/arg_spec.h"
#include "ops/framework/errors.h"
#include "ops/layer_norm/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/layer_norm/layer_norm_test_util.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

bool has_tag(const ArgSpec& spec, const std::string& tag) {
  return std::find(spec.tags.begin(), spec.tags.end(), tag) != spec.tags.end();
}

}  // namespace

TEST_CASE("layer_norm bind errors name the offending argument", "[layer_norm]") {
  const json base = {{"x", "bf16[8,6,4]"}, {"scale", "f32[4]"}, {"offset", "f32[4]"}};
  CHECK(bind_error_field(layer_norm_op(), base) == "<no error>");

  json missing = base;
  missing.erase("x");
  CHECK(bind_error_field(layer_norm_op(), missing) == "x");
  CHECK(bind_error_field(layer_norm_op(), {{"x", "i32[8,4]"}}) == "x");
  CHECK(bind_error_field(layer_norm_op(), {{"x", "f32[]"}}) == "x");

  json bad_axis = base;
  bad_axis["axis"] = 3;
  CHECK(bind_error_field(layer_norm_op(), bad_axis) == "axis");
  bad_axis["axis"] = -4;
  CHECK(bind_error_field(layer_norm_op(), bad_axis) == "axis");
  bad_axis["axis"] = "last";
  CHECK(bind_error_field(layer_norm_op(), bad_axis) == "axis");

  json scale_shape = base;
  scale_shape["scale"] = "f32[6]";  // C is 4 for the last axis
  CHECK(bind_error_field(layer_norm_op(), scale_shape) == "scale");
  json scale_axis = base;
  scale_axis["axis"] = 1;  // now C = 6, so f32[4] params no longer fit
  CHECK(bind_error_field(layer_norm_op(), scale_axis) == "scale");

  json offset_dtype = base;
  offset_dtype["offset"] = "i32[4]";
  CHECK(bind_error_field(layer_norm_op(), offset_dtype) == "offset");

  json epsilon = base;
  epsilon["epsilon"] = -1e-6;
  CHECK(bind_error_field(layer_norm_op(), epsilon) == "epsilon");
  epsilon["epsilon"] = "small";
  CHECK(bind_error_field(layer_norm_op(), epsilon) == "epsilon");

  json subtract_mean = base;
  subtract_mean["subtract_mean"] = 1;
  CHECK(bind_error_field(layer_norm_op(), subtract_mean) == "subtract_mean");

  json unknown = base;
  unknown["bias"] = "f32[4]";
  CHECK(bind_error_field(layer_norm_op(), unknown) == "bias");

  json scale_offset = base;
  scale_offset["scale_offset"] = "one";
  CHECK(bind_error_field(layer_norm_op(), scale_offset) == "scale_offset");
  scale_offset["scale_offset"] = 1.0;
  CHECK(bind_error_field(layer_norm_op(), scale_offset) == "<no error>");
  scale_offset.erase("scale");  // nothing to add it to
  CHECK(bind_error_field(layer_norm_op(), scale_offset) == "scale_offset");
}

TEST_CASE("layer_norm scale_offset is added to the scale, 0 is the canonical default",
          "[layer_norm]") {
  const BoundArgs plain = layer_norm_op().bind({{"x", "f32[1,4]"}, {"scale", "f32[4]"}});
  const BoundArgs zero =
      layer_norm_op().bind({{"x", "f32[1,4]"}, {"scale", "f32[4]"}, {"scale_offset", 0}});
  CHECK(plain.key() == zero.key());
  const BoundArgs args = layer_norm_op().bind(
      {{"x", "f32[1,4]"}, {"scale", "f32[4]"}, {"scale_offset", 1.0}, {"epsilon", 0.0}});
  CHECK(LayerNormProblem::from(args).scale_offset == 1.0);
  Tensor x(args.tensor("x")), scale(args.tensor("scale"));
  for (int c = 0; c < 4; ++c) {
    x.set(c, c + 1);
    scale.set(c, 0.5 * c);
  }
  Tensor out(args.tensor("x"));
  layer_norm_reference<float>(LayerNormProblem::from(args), x, &scale, nullptr, out);
  for (int c = 0; c < 4; ++c) {
    CHECK(out.get(c) == Approx((c + 1 - 2.5) / std::sqrt(1.25) * (1.0 + 0.5 * c)).epsilon(1e-6));
  }
}

TEST_CASE("layer_norm bind fills defaults canonically and splits x around the axis",
          "[layer_norm]") {
  const BoundArgs a = layer_norm_op().bind({{"x", "bf16[8,6,4]"}});
  CHECK(a.option("axis") == 2);
  CHECK(a.option("epsilon") == 1e-6);
  CHECK(a.option("subtract_mean") == true);
  CHECK_FALSE(a.has("scale"));
  // -1 and rank-1 are the same problem, so they share a cache key; null params are absent.
  const BoundArgs b =
      layer_norm_op().bind({{"x", "bf16[8,6,4]"}, {"axis", -1}, {"offset", nullptr}});
  CHECK(a.key() == b.key());

  const LayerNormProblem mid = LayerNormProblem::from(
      layer_norm_op().bind({{"x", "f32[2,3,5,7]"}, {"axis", -3}, {"scale", "f32[3]"}}));
  CHECK(mid.axis == 1);
  CHECK(mid.O == 2);
  CHECK(mid.C == 3);
  CHECK(mid.I == 35);
  CHECK(mid.has_scale);
  CHECK_FALSE(mid.has_offset);
}

TEST_CASE("layer_norm reference<float> matches hand-computed rows", "[layer_norm]") {
  // Row [1, 2, 3, 4]: mean 2.5, variance 1.25; RMSNorm: mean square 7.5.
  for (const bool subtract_mean : {true, false}) {
    CAPTURE(subtract_mean);
    const BoundArgs args = layer_norm_op().bind({{"x", "f32[1,4]"},
                                                 {"scale", "f32[4]"},
                                                 {"offset", "f32[4]"},
                                                 {"epsilon", 0.0},
                                                 {"subtract_mean", subtract_mean}});
    Tensor x(args.tensor("x")), scale(args.tensor("scale")), offset(args.tensor("offset"));
    for (int c = 0; c < 4; ++c) {
      x.set(c, c + 1);
      scale.set(c, 2.0);
      offset.set(c, c == 3 ? 1.0 : 0.0);
    }
    Tensor out(args.tensor("x"));
    LayerNormResiduals residuals;
    layer_norm_reference<float>(LayerNormProblem::from(args), x, &scale, &offset, out, &residuals);
    const double mean = subtract_mean ? 2.5 : 0.0, var = subtract_mean ? 1.25 : 7.5;
    REQUIRE(residuals.mean.size() == 1);
    CHECK(residuals.mean[0] == Approx(mean).margin(1e-7));
    CHECK(residuals.rstd[0] == Approx(1.0 / std::sqrt(var)).epsilon(1e-6));
    for (int c = 0; c < 4; ++c) {
      const double expected = (c + 1 - mean) / std::sqrt(var) * 2.0 + (c == 3 ? 1.0 : 0.0);
      CHECK(out.get(c) == Approx(expected).epsilon(1e-6));
    }
  }
}

TEST_CASE("layer_norm reference<float> agrees with the float64 oracle", "[layer_norm]") {
  const LayerNormOp& op = layer_norm_op();
  for (const json& args_json : layer_norm_cases()) {
    CAPTURE(args_json.dump());
    const BoundArgs args = op.bind(args_json);
    const TensorMap inputs = op.make_inputs(args, 3);
    TensorMap outputs = op.allocate_outputs(args);
    REQUIRE_NOTHROW(
        run_json(op.implementation("reference"), args, json::object(), inputs, outputs));
    const Comparison cmp = compare_all(args, inputs, outputs.at("out"));
    CAPTURE(cmp.max_abs_error, cmp.bound, cmp.worst_index);
    CHECK(judge(cmp) == Disposition::kPassed);
  }
}

TEST_CASE("layer_norm reference residuals are the oracle's statistics", "[layer_norm]") {
  const LayerNormOp& op = layer_norm_op();
  const BoundArgs args = op.bind({{"x", "f32[3,20,5]"}, {"axis", 1}});
  const LayerNormProblem p = LayerNormProblem::from(args);
  const TensorMap inputs = op.make_inputs(args, 1);
  const Tensor& x = inputs.at("x");
  Tensor out(args.tensor("x"));
  LayerNormResiduals residuals;
  layer_norm_reference<double>(p, x, nullptr, nullptr, out, &residuals);
  REQUIRE(residuals.mean.size() == 15);
  for (int64_t o = 0; o < 3; ++o) {
    for (int64_t i = 0; i < 5; ++i) {
      double sum = 0.0, sq = 0.0;
      for (int64_t c = 0; c < 20; ++c) sum += x.get((o * 20 + c) * 5 + i);
      const double mean = sum / 20;
      for (int64_t c = 0; c < 20; ++c) sq += std::pow(x.get((o * 20 + c) * 5 + i) - mean, 2);
      CHECK(residuals.mean[o * 5 + i] == Approx(mean).epsilon(1e-12));
      CHECK(residuals.rstd[o * 5 + i] == Approx(1.0 / std::sqrt(sq / 20 + 1e-6)).epsilon(1e-12));
    }
  }
}

TEST_CASE("layer_norm error model rejects a deliberately perturbed output", "[layer_norm]") {
  const LayerNormOp& op = layer_norm_op();
  for (const json& args_json :
       {json{{"x", "bf16[48,64]"}, {"scale", "f32[64]"}, {"offset", "f32[64]"}},
        json{{"x", "f32[16,40]"}, {"axis", 0}, {"subtract_mean", false}},
        json{{"x", "f16[6,16,3]"}, {"axis", 1}, {"scale", "f16[16]"}}}) {
    CAPTURE(args_json.dump());
    const BoundArgs args = op.bind(args_json);
    const TensorMap inputs = op.make_inputs(args, 7);
    TensorMap outputs = op.allocate_outputs(args);
    run_json(op.implementation("reference"), args, json::object(), inputs, outputs);
    Tensor& out = outputs.at("out");
    REQUIRE(judge(compare_all(args, inputs, out)) == Disposition::kPassed);
    // The first element of magnitude >= 0.5, moved towards zero by three units in the last place of
    // a 16-bit output (correct rounding is within half a unit, so this is 2.5 units wrong), or by
    // 1e-4 for f32 (which accumulates C roundings of 2^-24 per statistic, far below 1e-4).
    int64_t at = 0;
    while (std::fabs(out.get(at)) < 0.5) ++at;
    const double value = out.get(at);
    const double ulp =
        2.0 * unit_roundoff(out.dtype()) * std::exp2(std::floor(std::log2(std::fabs(value))));
    const double delta = out.dtype() == DType::kF32 ? 1e-4 : 3.0 * ulp;
    out.set(at, value - std::copysign(delta, value));  // towards zero: a finer grid, exact
    REQUIRE(std::fabs(out.get(at) - value) >= 0.9 * delta);
    const Comparison cmp = compare_all(args, inputs, out);
    CHECK(judge(cmp) == Disposition::kFailed);
    CHECK(cmp.worst_index == at);
  }
}

TEST_CASE("layer_norm catalog: upstream shapes are primary, ci_tests cover every edge small",
          "[layer_norm]") {
  std::vector<ArgSpec> specs = builtin_specs();
  std::erase_if(specs, [](const ArgSpec& spec) { return spec.op != "layer_norm"; });
  std::set<std::string> names, dtypes;
  int primary = 0, smoke = 0, rms = 0, non_last = 0, middle = 0, rank1 = 0, rank4 = 0;
  for (const ArgSpec& spec : specs) {
    INFO(spec.name);
    CHECK(names.insert(spec.name).second);
    const LayerNormProblem p = LayerNormProblem::from(spec.args);
    if (has_tag(spec, "primary")) {
      ++primary;
      CHECK(p.x_dtype == DType::kBF16);
      CHECK(p.scale_dtype == DType::kF32);
    }
    if (has_tag(spec, "smoke")) {
      ++smoke;
      CHECK(has_tag(spec, "ci_tests"));
    }
    if (!has_tag(spec, "ci_tests")) continue;
    // Small enough to verify in well under a second each on a 2-core CPU.
    CHECK(layer_norm_op().bytes(spec.args) < 1e6);
    dtypes.insert(std::string(dtype_name(p.x_dtype)));
    if (!p.subtract_mean) ++rms;
    if (!p.last_axis()) ++non_last;
    if (p.O > 1 && p.I > 1) ++middle;
    if (p.dims.size() == 1) ++rank1;
    if (p.dims.size() == 4) ++rank4;
  }
  CHECK(primary == 10);
  CHECK(smoke >= 3);
  CHECK(rms >= 5);
  CHECK(non_last >= 5);
  CHECK(middle >= 3);
  CHECK(rank1 >= 2);
  CHECK(rank4 >= 2);
  CHECK(dtypes == std::set<std::string>{"bf16", "f16", "f32", "f64"});
  for (const char* name : {"384res_64chan", "384res_128chan", "768res_128chan",
                           "384res_128chan_axis0", "768res_128chan_axis0"}) {
    CHECK(names.count(name) == 1);
    CHECK(names.count(std::string("rms_") + name) == 1);
  }
}
