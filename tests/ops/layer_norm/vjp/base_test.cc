// Tests for layer_norm_vjp's spec: binding and its errors, the oracle against central finite
// differences of the forward oracle, the reference against the oracle, and that the error model
// rejects perturbed gradients.
#include "ops/layer_norm/vjp/base.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "cli/toolkit/catalog/arg_spec.h"
#include "ops/framework/errors.h"
#include "ops/layer_norm/vjp/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/layer_norm/vjp/cases.h"
#include "tests/ops/vjp_test_util.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

bool has_tag(const ArgSpec& spec, const std::string& tag) {
  return std::find(spec.tags.begin(), spec.tags.end(), tag) != spec.tags.end();
}

std::vector<std::string> output_names(const BoundArgs& args) {
  std::vector<std::string> names;
  for (const TensorDecl& d : layer_norm_vjp_op().outputs(args)) names.push_back(d.name);
  return names;
}

}  // namespace

TEST_CASE("layer_norm_vjp bind errors name the offending argument", "[layer_norm_vjp]") {
  const json base = {
      {"x", "bf16[8,6,4]"}, {"dout", "bf16[8,6,4]"}, {"scale", "f32[4]"}, {"offset", "f32[4]"}};
  CHECK(bind_error_field(layer_norm_vjp_op(), base) == "<no error>");

  json missing = base;
  missing.erase("dout");
  std::string message;
  CHECK(bind_error_field(layer_norm_vjp_op(), missing, &message) == "dout");
  CHECK_THAT(message, Catch::StartsWith("layer_norm_vjp: ") && Catch::Contains("bf16[8,6,4]"));
  json dout_shape = base;
  dout_shape["dout"] = "bf16[8,6,5]";
  CHECK(bind_error_field(layer_norm_vjp_op(), dout_shape, &message) == "dout");
  CHECK_THAT(message, Catch::Contains("bf16[8,6,5]"));
  json dout_dtype = base;
  dout_dtype["dout"] = "f32[8,6,4]";
  CHECK(bind_error_field(layer_norm_vjp_op(), dout_dtype) == "dout");
  dout_dtype["dout"] = 3;
  CHECK(bind_error_field(layer_norm_vjp_op(), dout_dtype) == "dout");
  dout_dtype["dout"] = "bf16[8,6";
  CHECK(bind_error_field(layer_norm_vjp_op(), dout_dtype) == "dout");

  // The forward's checks, re-worded as the VJP op's, keep their field.
  json scale_shape = base;
  scale_shape["scale"] = "f32[6]";
  CHECK(bind_error_field(layer_norm_vjp_op(), scale_shape, &message) == "scale");
  CHECK_THAT(message, Catch::StartsWith("layer_norm_vjp: "));
  json x_missing = base;
  x_missing.erase("x");
  CHECK(bind_error_field(layer_norm_vjp_op(), x_missing) == "x");
  json bad_axis = base;
  bad_axis["axis"] = 3;
  CHECK(bind_error_field(layer_norm_vjp_op(), bad_axis) == "axis");
  json epsilon = base;
  epsilon["epsilon"] = -1.0;
  CHECK(bind_error_field(layer_norm_vjp_op(), epsilon) == "epsilon");
  json unknown = base;
  unknown["dy"] = "bf16[8,6,4]";
  CHECK(bind_error_field(layer_norm_vjp_op(), unknown) == "dy");
  json scale_offset = base;
  scale_offset.erase("scale");
  scale_offset["scale_offset"] = 1.0;
  CHECK(bind_error_field(layer_norm_vjp_op(), scale_offset) == "scale_offset");
}

TEST_CASE("layer_norm_vjp binds the forward's canonical args plus dout", "[layer_norm_vjp]") {
  const LayerNormVjpOp& op = layer_norm_vjp_op();
  CHECK(op.primal() == &layer_norm_op());
  CHECK(op.cotangents() == std::vector<std::string>{"dout"});
  const BoundArgs a = op.bind({{"x", "f32[2,3,5]"}, {"dout", "f32[2,3,5]"}, {"axis", -2}});
  CHECK(a.op == "layer_norm_vjp");
  CHECK(a.option("axis") == 1);
  CHECK(a.option("epsilon") == 1e-6);
  const LayerNormVjpProblem p = LayerNormVjpProblem::from(a);
  CHECK(p.O == 2);
  CHECK(p.C == 3);
  CHECK(p.I == 5);
  CHECK(p.dout_dtype == DType::kF32);
  CHECK(output_names(a) == std::vector<std::string>{"dx"});
  const BoundArgs b = op.bind(
      {{"x", "bf16[4,8]"}, {"dout", "bf16[4,8]"}, {"scale", "bf16[8]"}, {"offset", "f32[8]"}});
  CHECK(output_names(b) == std::vector<std::string>{"dx", "dscale", "doffset"});
  const std::vector<TensorDecl> outs = op.outputs(b);
  CHECK(outs[1].spec.to_string() == "bf16[8]");
  CHECK(outs[2].spec.to_string() == "f32[8]");
  CHECK(op.inputs(b).back().name == "dout");
  const BoundArgs c = op.bind({{"x", "f32[4,8]"}, {"dout", "f32[4,8]"}, {"offset", "f32[8]"}});
  CHECK(output_names(c) == std::vector<std::string>{"dx", "doffset"});
  // x, dout read and dx written once; scale read, dscale and doffset written once.
  CHECK(op.bytes(b) == 3.0 * 32 * 2 + 2.0 * 8 * 2 + 8 * 4);
}

TEST_CASE("layer_norm_vjp oracle matches central finite differences of the forward oracle",
          "[layer_norm_vjp]") {
  // f64 everywhere (exact perturbations): layer norm and RMSNorm; last, first and middle axes;
  // with and without scale / offset; scale_offset; epsilon large enough to matter.
  for (const json& args : {
           json{{"x", "f64[3,7]"}, {"scale", "f64[7]"}, {"offset", "f64[7]"}},
           json{{"x", "f64[4,9]"}},
           json{{"x", "f64[5,6]"}, {"offset", "f64[6]"}, {"epsilon", 0.3}},
           json{{"x", "f64[3,8]"}, {"scale", "f64[8]"}, {"subtract_mean", false}},
           json{{"x", "f64[4,5]"}, {"subtract_mean", false}, {"epsilon", 0.5}},
           json{{"x", "f64[6,4,3]"}, {"axis", 0}, {"scale", "f64[6]"}, {"offset", "f64[6]"}},
           json{{"x", "f64[2,5,3]"}, {"axis", 1}, {"scale", "f64[5]"}, {"offset", "f64[5]"}},
           json{{"x", "f64[2,6,4]"}, {"axis", 1}, {"scale", "f64[6]"}, {"subtract_mean", false}},
           json{{"x", "f64[3,6]"},
                {"scale", "f64[6]"},
                {"scale_offset", 1.0},
                {"subtract_mean", false}},
           json{{"x", "f64[5,4,2]"},
                {"axis", 0},
                {"scale", "f64[5]"},
                {"offset", "f64[5]"},
                {"scale_offset", -0.5}},
           json{{"x", "f64[9]"}, {"scale", "f64[9]"}, {"offset", "f64[9]"}},
       }) {
    json vjp_args = args;
    vjp_args["dout"] = args.at("x");
    check_vjp_by_finite_differences(layer_norm_vjp_op(), vjp_args, 3, 12);
  }
}

TEST_CASE("layer_norm_vjp reference<float> and <double> agree with the float64 oracle",
          "[layer_norm_vjp]") {
  const LayerNormVjpOp& op = layer_norm_vjp_op();
  std::vector<json> cases = layer_norm_vjp_cases();
  cases.push_back({{"x", "f64[12,30]"}, {"dout", "f64[12,30]"}, {"scale", "f64[30]"}});
  for (const json& args_json : cases) {
    CAPTURE(args_json.dump());
    const BoundArgs args = op.bind(args_json);
    const TensorMap inputs = op.make_inputs(args, 3);
    TensorMap outputs = op.allocate_outputs(args);
    REQUIRE_NOTHROW(
        run_json(op.implementation("reference"), args, json::object(), inputs, outputs));
    check_vjp_passes(args, inputs, outputs);
  }
}

TEST_CASE("layer_norm_vjp reference<float> matches a hand-computed row", "[layer_norm_vjp]") {
  // Row x = [1, 2, 3, 4] (mean 2.5, var 1.25), dout = [1, 0, 0, 0], scale 2, epsilon 0.
  const LayerNormVjpOp& op = layer_norm_vjp_op();
  const BoundArgs args = op.bind({{"x", "f32[1,4]"},
                                  {"dout", "f32[1,4]"},
                                  {"scale", "f32[4]"},
                                  {"offset", "f32[4]"},
                                  {"epsilon", 0.0}});
  const LayerNormVjpProblem p = LayerNormVjpProblem::from(args);
  Tensor x(args.tensor("x")), dout(args.tensor("x")), scale(args.tensor("scale"));
  for (int c = 0; c < 4; ++c) {
    x.set(c, c + 1);
    dout.set(c, c == 0 ? 1.0 : 0.0);
    scale.set(c, 2.0);
  }
  Tensor dx(args.tensor("x")), dscale(args.tensor("scale")), doffset(args.tensor("scale"));
  layer_norm_vjp_reference<float>(p, x, &scale, nullptr, dout, dx, &dscale, &doffset);
  const double r = 1.0 / std::sqrt(1.25);
  const double xhat0 = -1.5 * r, gbar = 0.5, h = 2.0 * xhat0 / 4.0;
  for (int c = 0; c < 4; ++c) {
    const double g = c == 0 ? 2.0 : 0.0;
    CHECK(dx.get(c) == Approx(r * (g - gbar - (c + 1 - 2.5) * r * h)).epsilon(1e-6));
    CHECK(dscale.get(c) == Approx(c == 0 ? xhat0 : 0.0).epsilon(1e-6));
    CHECK(doffset.get(c) == (c == 0 ? 1.0 : 0.0));
  }
}

TEST_CASE("layer_norm_vjp error model rejects deliberately perturbed gradients",
          "[layer_norm_vjp]") {
  const LayerNormVjpOp& op = layer_norm_vjp_op();
  for (const json& args_json : {json{{"x", "bf16[48,64]"},
                                     {"dout", "bf16[48,64]"},
                                     {"scale", "f32[64]"},
                                     {"offset", "f32[64]"}},
                                json{{"x", "f32[16,40]"},
                                     {"dout", "f32[16,40]"},
                                     {"axis", 0},
                                     {"scale", "f32[16]"},
                                     {"subtract_mean", false}},
                                json{{"x", "f16[6,16,3]"},
                                     {"dout", "f16[6,16,3]"},
                                     {"axis", 1},
                                     {"scale", "f16[16]"},
                                     {"offset", "f16[16]"}},
                                json{{"x", "f32[24,40]"},
                                     {"dout", "f32[24,40]"},
                                     {"scale", "bf16[40]"},
                                     {"offset", "f32[40]"}}}) {
    const BoundArgs args = op.bind(args_json);
    const TensorMap inputs = op.make_inputs(args, 7);
    TensorMap outputs = op.allocate_outputs(args);
    run_json(op.implementation("reference"), args, json::object(), inputs, outputs);
    for (const TensorDecl& decl : op.outputs(args)) {
      CAPTURE(args_json.dump(), decl.name);
      TensorMap perturbed = outputs;
      perturbed[decl.name] = outputs.at(decl.name).copy(host_memory());
      Tensor& out = perturbed[decl.name];
      REQUIRE(judge(compare_vjp(args, inputs, perturbed).at(decl.name)) == Disposition::kPassed);
      // The element of largest magnitude, moved towards zero by three units in the last place
      // of a 16-bit output (correct rounding is within half a unit, so this is 2.5 units wrong),
      // or by a relative 1e-4 for f32 (the bound allows about (C + 8) or R roundings of 2^-24
      // times the terms' magnitude, far below).
      int64_t at = 0;
      for (int64_t i = 0; i < out.num_elements(); ++i) {
        if (std::fabs(out.get(i)) > std::fabs(out.get(at))) at = i;
      }
      const double value = out.get(at);
      const double ulp =
          2.0 * unit_roundoff(out.dtype()) * std::exp2(std::floor(std::log2(std::fabs(value))));
      const double delta = out.dtype() == DType::kF32 ? 1e-4 * std::fabs(value) : 3.0 * ulp;
      out.set(at, value - std::copysign(delta, value));
      REQUIRE(std::fabs(out.get(at) - value) >= 0.9 * delta);
      const Comparison cmp = compare_vjp(args, inputs, perturbed).at(decl.name);
      CAPTURE(cmp.bound, cmp.max_abs_error);
      CHECK(judge(cmp) == Disposition::kFailed);
      CHECK(cmp.worst_index == at);
    }
  }
}

TEST_CASE("layer_norm_vjp catalog: the forward's primary shapes, ci_tests cover every option",
          "[layer_norm_vjp]") {
  std::vector<ArgSpec> specs = builtin_specs();
  std::erase_if(specs, [](const ArgSpec& spec) { return spec.op != "layer_norm_vjp"; });
  std::set<std::string> names, dtypes;
  int primary = 0, bench = 0, smoke = 0, rms = 0, non_last = 0, middle = 0, no_scale = 0,
      offset_only = 0, scale_offset = 0;
  for (const ArgSpec& spec : specs) {
    INFO(spec.name);
    CHECK(names.insert(spec.name).second);
    const LayerNormVjpProblem p = LayerNormVjpProblem::from(spec.args);
    CHECK(spec.args.tensor("dout") == spec.args.tensor("x"));
    if (has_tag(spec, "primary")) {
      ++primary;
      CHECK(p.x_dtype == DType::kBF16);
    }
    if (has_tag(spec, "bench_cpu")) ++bench;
    if (has_tag(spec, "smoke")) {
      ++smoke;
      CHECK(has_tag(spec, "ci_tests"));
    }
    if (!has_tag(spec, "ci_tests")) continue;
    CHECK(layer_norm_vjp_op().bytes(spec.args) < 1e6);
    dtypes.insert(std::string(dtype_name(p.x_dtype)));
    if (!p.subtract_mean) ++rms;
    if (!p.last_axis()) ++non_last;
    if (p.O > 1 && p.I > 1) ++middle;
    if (!p.has_scale) ++no_scale;
    if (!p.has_scale && p.has_offset) ++offset_only;
    if (p.scale_offset != 0.0) ++scale_offset;
  }
  CHECK(primary == 10);
  CHECK(bench >= 8);
  CHECK(smoke >= 3);
  CHECK(rms >= 5);
  CHECK(non_last >= 5);
  CHECK(middle >= 3);
  CHECK(no_scale >= 2);
  CHECK(offset_only >= 1);
  CHECK(scale_offset >= 2);
  CHECK(dtypes == std::set<std::string>{"bf16", "f16", "f32", "f64"});
  // Every forward primary shape has its VJP.
  for (const ArgSpec& spec : builtin_specs()) {
    if (spec.op == "layer_norm" && has_tag(spec, "primary")) CHECK(names.count(spec.name) == 1);
  }
}
