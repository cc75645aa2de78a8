// Tests for gated_linear_unit_vjp's spec: binding and its errors, the oracle against central
// finite differences for every activation, the reference against the oracle, and that the error
// model rejects a perturbed gradient.
#include "ops/gated_linear_unit/vjp/base.h"

#include <catch2/catch.hpp>
#include <string>

#include "ops/framework/errors.h"
#include "ops/gated_linear_unit/api.h"
#include "ops/gated_linear_unit/vjp/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/gated_linear_unit/vjp/test_util.h"
#include "tests/ops/vjp_test_util.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const json kBase = {{"x", "bf16[3,5,8]"},
                    {"weights", "bf16[8,2,6]"},
                    {"activation", "silu"},
                    {"dout", "bf16[3,5,6]"}};

}  // namespace

TEST_CASE("gated_linear_unit_vjp binds the forward's args plus dout", "[glu_vjp]") {
  const BoundArgs bound = gated_linear_unit_vjp_op().bind(kBase);
  CHECK(bound.op == "gated_linear_unit_vjp");
  const std::vector<TensorDecl> outputs = gated_linear_unit_vjp_op().outputs(bound);
  REQUIRE(outputs.size() == 2);
  CHECK(outputs[0].name == "dx");
  CHECK(outputs[0].spec.to_string() == "bf16[3,5,8]");
  CHECK(outputs[1].name == "dweights");
  CHECK(outputs[1].spec.to_string() == "bf16[8,2,6]");
  json unfused = {{"x", "f32[4,8]"},
                  {"gate_weights", "f32[8,6]"},
                  {"proj_weights", "f32[8,6]"},
                  {"dout", "f32[4,6]"}};
  const std::vector<TensorDecl> split =
      gated_linear_unit_vjp_op().outputs(gated_linear_unit_vjp_op().bind(unfused));
  REQUIRE(split.size() == 3);
  CHECK(split[1].name == "dgate_weights");
  CHECK(split[2].name == "dproj_weights");
  CHECK(gated_linear_unit_vjp_op().primal() == &gated_linear_unit_op());
}

TEST_CASE("gated_linear_unit_vjp bind errors name the offending argument", "[glu_vjp]") {
  CHECK(bind_error_field(gated_linear_unit_vjp_op(), kBase) == "<no error>");
  json missing = kBase;
  missing.erase("dout");
  CHECK(bind_error_field(gated_linear_unit_vjp_op(), missing) == "dout");
  json shape = kBase;
  shape["dout"] = "bf16[3,5,8]";
  CHECK(bind_error_field(gated_linear_unit_vjp_op(), shape) == "dout");
  json dtype = kBase;
  dtype["dout"] = "f32[3,5,6]";
  CHECK(bind_error_field(gated_linear_unit_vjp_op(), dtype) == "dout");
  json act = kBase;
  act["activation"] = "swish";
  CHECK(bind_error_field(gated_linear_unit_vjp_op(), act) == "activation");
  json weights = kBase;
  weights["weights"] = "bf16[7,2,6]";
  CHECK(bind_error_field(gated_linear_unit_vjp_op(), weights) == "weights");
}

TEST_CASE("gated_linear_unit_vjp's oracle matches central finite differences", "[glu_vjp]") {
  // f64 tensors: exact perturbations; every activation, fused and unfused, rank 3.
  for (const char* act : {"none", "silu", "gelu", "gelu_tanh", "sigmoid", "relu"}) {
    CAPTURE(act);
    check_vjp_by_finite_differences(gated_linear_unit_vjp_op(), {{"x", "f64[2,3,5]"},
                                                                 {"weights", "f64[5,2,4]"},
                                                                 {"activation", act},
                                                                 {"dout", "f64[2,3,4]"}});
  }
  check_vjp_by_finite_differences(gated_linear_unit_vjp_op(),
                                  {{"x", "f64[6,3]"},
                                   {"gate_weights", "f64[3,4]"},
                                   {"proj_weights", "f64[3,4]"},
                                   {"activation", "gelu"},
                                   {"dout", "f64[6,4]"}},
                                  2, 40);
}

TEST_CASE("the gated_linear_unit_vjp reference passes the oracle's bound", "[glu_vjp]") {
  const Implementation& reference = gated_linear_unit_vjp_op().implementation("reference");
  for (const json& args_json : {kBase,
                                json{{"x", "f32[40,33]"},
                                     {"weights", "f32[33,2,21]"},
                                     {"activation", "gelu_tanh"},
                                     {"dout", "f32[40,21]"}},
                                json{{"x", "f16[20,9]"},
                                     {"gate_weights", "f16[9,5]"},
                                     {"proj_weights", "f16[9,5]"},
                                     {"activation", "relu"},
                                     {"dout", "f16[20,5]"}}}) {
    const BoundArgs args = gated_linear_unit_vjp_op().bind(args_json);
    const TensorMap inputs = gated_linear_unit_vjp_op().make_inputs(args, 5);
    check_glu_vjp_outputs(args, inputs, run_glu_vjp(reference, args, inputs, {}));
  }
}

namespace {

// The sampled violations of the reference's `name` output of `dtype` [64,48] x [48,2,40] silu
// after one element moved to value * scale + offset.
int64_t perturbed_violations(const std::string& dtype, const char* name, double scale,
                             double offset) {
  const BoundArgs args = gated_linear_unit_vjp_op().bind({{"x", dtype + "[64,48]"},
                                                          {"weights", dtype + "[48,2,40]"},
                                                          {"activation", "silu"},
                                                          {"dout", dtype + "[64,40]"}});
  const TensorMap inputs = gated_linear_unit_vjp_op().make_inputs(args, 2);
  const Implementation& reference = gated_linear_unit_vjp_op().implementation("reference");
  TensorMap outputs = run_glu_vjp(reference, args, inputs, {});
  Tensor& out = outputs.at(name);
  const int64_t i = out.num_elements() / 3;
  out.set(i, out.get(i) * scale + offset);
  const std::vector<int64_t> index = {i};
  return compare_to_oracle(out, gated_linear_unit_vjp_op().oracle(args, inputs, name, index),
                           gated_linear_unit_vjp_op().error_model(args))
      .violations;
}

}  // namespace

TEST_CASE("gated_linear_unit_vjp's error model rejects a perturbed gradient", "[glu_vjp]") {
  for (const char* name : {"dx", "dweights"}) {
    CAPTURE(name);
    // 2^-12 relative and absolute at one element: inside a shape test's 1e-3, outside the bound.
    CHECK(perturbed_violations("f32", name, 1.0 + std::ldexp(1.0, -12), std::ldexp(1.0, -12)) == 1);
  }
}

TEST_CASE("tokamax::gated_linear_unit_vjp returns both gradients", "[glu_vjp]") {
  const BoundArgs args = gated_linear_unit_vjp_op().bind(kBase);
  const TensorMap inputs = gated_linear_unit_vjp_op().make_inputs(args, 4);
  GatedLinearUnitVjpOptions options;
  options.activation = Activation::kSilu;
  const GluGradients grads =
      gated_linear_unit_vjp(inputs.at("x"), inputs.at("weights"), inputs.at("dout"), options);
  check_glu_vjp_outputs(args, inputs, {{"dx", grads.dx}, {"dweights", grads.dweights}});
}

TEST_CASE("gated_linear_unit_vjp's bf16 bound has H in bf16 and still rejects a wrong gradient",
          "[glu_vjp]") {
  // H's rounding is in the model only where both x and the weights are bf16 (upstream's forward
  // product is then bf16, and so is its cotangent).
  auto h_roundoff = [](const char* x, const char* w) {
    const std::string xs = x, ws = w;
    return glu_vjp_h_roundoff(GluProblem::from(gated_linear_unit_vjp_op().bind(
        {{"x", xs + "[4,3]"}, {"weights", ws + "[3,2,5]"}, {"dout", xs + "[4,5]"}})));
  };
  CHECK(h_roundoff("bf16", "bf16") == std::ldexp(1.0, -8));
  CHECK(h_roundoff("f32", "f32") == 0.0);
  CHECK(h_roundoff("f16", "f16") == 0.0);
  CHECK(h_roundoff("bf16", "f32") == 0.0);
  for (const char* name : {"dx", "dweights"}) {
    CAPTURE(name);
    // A quarter of the value and of H's typical size off (a dropped term, a wrong derivative).
    CHECK(perturbed_violations("bf16", name, 1.25, 0.25) == 1);
  }
}
