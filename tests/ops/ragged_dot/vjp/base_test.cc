// Tests for ragged_dot_vjp's spec: binding and its errors, the oracle against central finite
// differences, the reference against the oracle, and that the error model rejects a perturbed
// gradient.
#include "ops/ragged_dot/vjp/base.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "ops/framework/errors.h"
#include "ops/ragged_dot/api.h"
#include "ops/ragged_dot/vjp/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/ragged_dot/vjp/test_util.h"
#include "tests/ops/vjp_test_util.h"
#include "tests/test_util.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

std::string bind_error(const json& args) {
  try {
    ragged_dot_vjp_op().bind(args);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "<no error>";
}

const json kBase = {{"lhs", "bf16[16,8]"},
                    {"rhs", "bf16[2,8,12]"},
                    {"group_sizes", {6, 10}},
                    {"dout", "bf16[16,12]"}};

RaggedDotVjpOptions reference_options() {
  RaggedDotVjpOptions options;
  options.implementation = "reference";
  return options;
}

}  // namespace

TEST_CASE("ragged_dot_vjp binds the forward's args plus dout of the output's spec",
          "[ragged_dot_vjp]") {
  const BoundArgs bound = ragged_dot_vjp_op().bind(kBase);
  CHECK(bound.op == "ragged_dot_vjp");
  CHECK(bound.args.at("dout") == "bf16[16,12]");
  CHECK(bound.args.at("preferred_element_type") == "bf16");  // the forward's default, filled in
  const RaggedDotVjpProblem p = RaggedDotVjpProblem::from(bound);
  CHECK(p.dlhs_dtype == DType::kBF16);
  CHECK(p.fwd.group_starts.back() == 16);
  const std::vector<TensorDecl> outputs = ragged_dot_vjp_op().outputs(bound);
  REQUIRE(outputs.size() == 2);
  CHECK(outputs[0].name == "dlhs");
  CHECK(outputs[0].spec.to_string() == "bf16[16,8]");
  CHECK(outputs[1].name == "drhs");
  CHECK(outputs[1].spec.to_string() == "bf16[2,8,12]");
  CHECK(ragged_dot_vjp_op().primal() == &ragged_dot_op());
}

TEST_CASE("ragged_dot_vjp bind errors name the offending argument", "[ragged_dot_vjp]") {
  CHECK(bind_error_field(ragged_dot_vjp_op(), kBase) == "<no error>");
  json missing = kBase;
  missing.erase("dout");
  CHECK(bind_error_field(ragged_dot_vjp_op(), missing) == "dout");
  CHECK(bind_error(missing).find("bf16[16,12]") != std::string::npos);  // says what it wants
  json shape = kBase;
  shape["dout"] = "bf16[16,8]";
  CHECK(bind_error_field(ragged_dot_vjp_op(), shape) == "dout");
  json dtype = kBase;
  dtype["dout"] = "f32[16,12]";  // the output is bf16 (the inputs' type)
  CHECK(bind_error_field(ragged_dot_vjp_op(), dtype) == "dout");
  dtype["preferred_element_type"] = "f32";
  CHECK(bind_error_field(ragged_dot_vjp_op(), dtype) == "<no error>");
  json not_spec = kBase;
  not_spec["dout"] = 3;
  CHECK(bind_error_field(ragged_dot_vjp_op(), not_spec) == "dout");
  // The forward's own errors keep their field, under the VJP's name.
  json bad_sizes = kBase;
  bad_sizes["group_sizes"] = {6, 11};
  CHECK(bind_error_field(ragged_dot_vjp_op(), bad_sizes) == "group_sizes");
  CHECK(bind_error(bad_sizes).rfind("ragged_dot_vjp: ", 0) == 0);
  json unknown = kBase;
  unknown["dlhs"] = "bf16[16,8]";
  CHECK(bind_error_field(ragged_dot_vjp_op(), unknown) == "dlhs");
  // Arguments whose gradient is not this op's are refused by name.
  json bias = kBase;
  bias["rhs_bias"] = "bf16[2,12]";
  CHECK(bind_error_field(ragged_dot_vjp_op(), bias) == "rhs_bias");
  json act = kBase;
  act["activation"] = "silu";
  CHECK(bind_error_field(ragged_dot_vjp_op(), act) == "activation");
}

TEST_CASE("ragged_dot_vjp's oracle matches central finite differences of the forward",
          "[ragged_dot_vjp]") {
  // f64 tensors: exact perturbations. Empty groups, rows past the sum, a shard, K = 1.
  check_vjp_by_finite_differences(ragged_dot_vjp_op(), {{"lhs", "f64[12,5]"},
                                                        {"rhs", "f64[3,5,7]"},
                                                        {"group_sizes", {4, 0, 6}},
                                                        {"dout", "f64[12,7]"}});
  check_vjp_by_finite_differences(ragged_dot_vjp_op(), {{"lhs", "f64[10,6]"},
                                                        {"rhs", "f64[2,6,4]"},
                                                        {"group_offset", 1},
                                                        {"group_sizes", {3, 4, 3}},
                                                        {"dout", "f64[10,4]"}});
  check_vjp_by_finite_differences(
      ragged_dot_vjp_op(),
      {{"lhs", "f64[9,1]"}, {"rhs", "f64[2,1,3]"}, {"group_sizes", {5, 4}}, {"dout", "f64[9,3]"}},
      3, 40);
}

TEST_CASE("the ragged_dot_vjp reference passes the oracle's bound", "[ragged_dot_vjp]") {
  const Implementation& reference = ragged_dot_vjp_op().implementation("reference");
  for (const json& args_json : {kBase,
                                json{{"lhs", "f32[70,33]"},
                                     {"rhs", "f32[3,33,21]"},
                                     {"group_sizes", {0, 50, 17}},
                                     {"dout", "f32[70,21]"}},
                                json{{"lhs", "f16[20,9]"},
                                     {"rhs", "f16[2,9,5]"},
                                     {"preferred_element_type", "f32"},
                                     {"group_sizes", {13, 7}},
                                     {"dout", "f32[20,5]"}}}) {
    const BoundArgs args = ragged_dot_vjp_op().bind(args_json);
    const TensorMap inputs = ragged_dot_vjp_op().make_inputs(args, 5);
    check_ragged_dot_vjp_outputs(args, inputs, run_ragged_dot_vjp(reference, args, inputs, {}));
  }
}

TEST_CASE("ragged_dot_vjp's error model rejects a perturbed gradient", "[ragged_dot_vjp]") {
  const BoundArgs args = ragged_dot_vjp_op().bind({{"lhs", "f32[64,48]"},
                                                   {"rhs", "f32[2,48,40]"},
                                                   {"group_sizes", {30, 34}},
                                                   {"dout", "f32[64,40]"}});
  const TensorMap inputs = ragged_dot_vjp_op().make_inputs(args, 2);
  const Implementation& reference = ragged_dot_vjp_op().implementation("reference");
  for (const char* name : {"dlhs", "drhs"}) {
    CAPTURE(name);
    TensorMap outputs = run_ragged_dot_vjp(reference, args, inputs, {});
    Tensor& out = outputs.at(name);
    // An error of 2^-12 (relative and absolute) at one element: inside the 1e-3 a test of
    // shapes alone would pick, and outside the bound.
    const int64_t i = out.num_elements() / 3;
    out.set(i, out.get(i) * (1.0 + std::ldexp(1.0, -12)) + std::ldexp(1.0, -12));
    std::vector<int64_t> index = {i};
    const Comparison c =
        compare_to_oracle(out, ragged_dot_vjp_op().oracle(args, inputs, name, index),
                          ragged_dot_vjp_op().error_model(args));
    CHECK(c.violations == 1);
  }
}

TEST_CASE("tokamax::ragged_dot_vjp returns both gradients", "[ragged_dot_vjp]") {
  const BoundArgs args = ragged_dot_vjp_op().bind(kBase);
  const TensorMap inputs = ragged_dot_vjp_op().make_inputs(args, 4);
  const RaggedDotGradients grads =
      ragged_dot_vjp(inputs.at("lhs"), inputs.at("rhs"), inputs.at("group_sizes"),
                     inputs.at("dout"), reference_options());
  TensorMap outputs = {{"dlhs", grads.dlhs}, {"drhs", grads.drhs}};
  check_ragged_dot_vjp_outputs(args, inputs, outputs);
  CHECK_THROWS_AS(ragged_dot_vjp(inputs.at("lhs"), inputs.at("rhs"), inputs.at("group_sizes"),
                                 inputs.at("lhs")),
                  InvalidArgument);
}

TEST_CASE("a ragged_dot_vjp call is recorded under TOKAMAX_RECORD like a forward call",
          "[ragged_dot_vjp]") {
  ScratchDir dir;
  const std::string path = dir.file("calls.jsonl");
  const BoundArgs args = ragged_dot_vjp_op().bind(kBase);
  const TensorMap inputs = ragged_dot_vjp_op().make_inputs(args, 4);
  setenv("TOKAMAX_RECORD", path.c_str(), 1);
  ragged_dot_vjp(inputs.at("lhs"), inputs.at("rhs"), inputs.at("group_sizes"), inputs.at("dout"));
  unsetenv("TOKAMAX_RECORD");
  const json record = json::parse(read_file(path));
  CHECK(record.at("op") == "ragged_dot_vjp");
  CHECK(record.at("args") == args.args);
  CHECK(record.at("implementation") == "cpu");
}
