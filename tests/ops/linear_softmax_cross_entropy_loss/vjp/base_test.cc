// Tests for linear_softmax_cross_entropy_loss_vjp's spec: binding and its errors, the oracle
// against central finite differences of the forward for every reduction and padding, the
// reference against the oracle, and that the error model rejects a perturbed gradient.
#include "ops/linear_softmax_cross_entropy_loss/vjp/base.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "ops/framework/errors.h"
#include "ops/linear_softmax_cross_entropy_loss/api.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/linear_softmax_cross_entropy_loss/vjp/test_util.h"
#include "tests/ops/vjp_test_util.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const LinearSoftmaxCrossEntropyLossVjpOp& vjp_op() {
  return linear_softmax_cross_entropy_loss_vjp_op();
}

std::string bind_error(const json& args) {
  std::string message = "<no error>";
  testing::bind_error_field(vjp_op(), args, &message);
  return message;
}

const json kSum = {{"x", "bf16[16,8]"}, {"w", "bf16[8,40]"}, {"dloss", "f32[]"}};

}  // namespace

TEST_CASE("lsce_vjp binds the forward's args plus dloss of the loss's spec", "[lsce_vjp]") {
  const BoundArgs bound = vjp_op().bind(kSum);
  CHECK(bound.op == "linear_softmax_cross_entropy_loss_vjp");
  CHECK(bound.args.at("dloss") == "f32[]");
  CHECK(bound.args.at("reduction") == "sum");  // the forward's default, filled in
  CHECK(bound.args.at("labels") == "i32[16]");
  const std::vector<TensorDecl> outputs = vjp_op().outputs(bound);
  REQUIRE(outputs.size() == 2);
  CHECK(outputs[0].name == "dx");
  CHECK(outputs[0].spec.to_string() == "bf16[16,8]");
  CHECK(outputs[1].name == "dw");
  CHECK(outputs[1].spec.to_string() == "bf16[8,40]");
  CHECK(vjp_op().primal() == &linear_softmax_cross_entropy_loss_op());
  CHECK(vjp_op().cotangents() == std::vector<std::string>{"dloss"});
  const BoundArgs none = vjp_op().bind(lsce_vjp_json("f32[5,3]", "f32[3,7]", "none"));
  CHECK(none.args.at("dloss") == "f32[5]");
  CHECK(vjp_op().flops(none) == 6.0 * 5 * 3 * 7 + 5.0 * 5 * 7);
}

TEST_CASE("lsce_vjp bind errors name the offending argument", "[lsce_vjp]") {
  CHECK(bind_error_field(vjp_op(), kSum) == "<no error>");
  json missing = kSum;
  missing.erase("dloss");
  CHECK(bind_error_field(vjp_op(), missing) == "dloss");
  CHECK(bind_error(missing).find("f32[]") != std::string::npos);  // says what it wants
  json shape = kSum;
  shape["dloss"] = "f32[16]";  // reduction sum: a scalar
  CHECK(bind_error_field(vjp_op(), shape) == "dloss");
  json none = kSum;
  none["reduction"] = "none";  // the loss is f32[16] then
  CHECK(bind_error_field(vjp_op(), none) == "dloss");
  none["dloss"] = "f32[16]";
  CHECK(bind_error_field(vjp_op(), none) == "<no error>");
  none["dloss"] = "f32[15]";
  CHECK(bind_error_field(vjp_op(), none) == "dloss");
  json dtype = kSum;
  dtype["dloss"] = "bf16[]";  // the loss is f32 whatever the inputs
  CHECK(bind_error_field(vjp_op(), dtype) == "dloss");
  CHECK(bind_error(dtype).find("bf16[]") != std::string::npos);
  json not_spec = kSum;
  not_spec["dloss"] = 1.0;
  CHECK(bind_error_field(vjp_op(), not_spec) == "dloss");
  // The forward's own errors keep their field, under the VJP's name.
  json bad_w = kSum;
  bad_w["w"] = "bf16[9,40]";
  CHECK(bind_error_field(vjp_op(), bad_w) == "w");
  CHECK(bind_error(bad_w).rfind("linear_softmax_cross_entropy_loss_vjp: ", 0) == 0);
  json bad_reduction = kSum;
  bad_reduction["reduction"] = "max";
  CHECK(bind_error_field(vjp_op(), bad_reduction) == "reduction");
  json bad_labels = kSum;
  bad_labels["labels"] = "i32[15]";
  CHECK(bind_error_field(vjp_op(), bad_labels) == "labels");
  json unknown = kSum;
  unknown["dx"] = "bf16[16,8]";
  CHECK(bind_error_field(vjp_op(), unknown) == "dx");
}

TEST_CASE("lsce_vjp takes the forward's residual lse as an optional f32[B] input", "[lsce_vjp]") {
  json with_lse = kSum;
  with_lse["lse"] = "f32[16]";
  const BoundArgs bound = vjp_op().bind(with_lse);
  CHECK(bound.args.at("lse") == "f32[16]");
  const std::vector<TensorDecl> inputs = vjp_op().inputs(bound);
  CHECK(inputs.back().name == "lse");
  CHECK_FALSE(vjp_op().bind(kSum).has("lse"));
  CHECK(vjp_op().bytes(bound) == vjp_op().bytes(vjp_op().bind(kSum)) + 4.0 * 16);
  for (const json& bad :
       {json("f32[15]"), json("bf16[16]"), json("f32[16,1]"), json(16), json("f32[")}) {
    json args = kSum;
    args["lse"] = bad;
    CAPTURE(bad.dump());
    CHECK(bind_error_field(vjp_op(), args) == "lse");
  }
  json shape = kSum;
  shape["lse"] = "f32[15]";
  CHECK(bind_error(shape).find("f32[16]") != std::string::npos);  // says what it wants
  json residuals = kSum;
  residuals["return_residuals"] = true;  // the forward's option, not the VJP's
  CHECK(bind_error_field(vjp_op(), residuals) == "return_residuals");
  // Generated as the forward defines it: its residual output, to rounding.
  const BoundArgs args = vjp_op().bind({{"x", "f32[12,20]"},
                                        {"w", "f32[20,90]"},
                                        {"padded_labels", 0.3},
                                        {"dloss", "f32[]"},
                                        {"lse", "f32[12]"}});
  const TensorMap made = vjp_op().make_inputs(args, 5);
  TensorMap forward_inputs;
  for (const char* name : {"x", "labels", "w"}) forward_inputs.emplace(name, made.at(name));
  const LinearSoftmaxCrossEntropyOptions ref = [] {
    LinearSoftmaxCrossEntropyOptions o;
    o.implementation = "reference";
    return o;
  }();
  const Tensor lse = linear_softmax_cross_entropy_loss_with_residuals(
                         made.at("x"), made.at("labels"), made.at("w"), ref)
                         .lse;
  for (int64_t b = 0; b < 12; ++b) {
    CHECK(made.at("lse").get(b) == Approx(lse.get(b)).epsilon(1e-6));
  }
}

TEST_CASE("lsce_vjp's row weights check labels and dloss", "[lsce_vjp]") {
  const BoundArgs args = vjp_op().bind(lsce_vjp_json("f32[4,3]", "f32[3,5]", "mean"));
  const LinearSoftmaxCrossEntropyVjpProblem p = LinearSoftmaxCrossEntropyVjpProblem::from(args);
  Tensor labels(TensorSpec{DType::kI32, {4}});
  int32_t* label = labels.data<int32_t>();
  label[0] = 0;
  label[1] = -1;  // padding
  label[2] = 5;   // = V: outside [0, V) too
  label[3] = 4;
  Tensor dloss(TensorSpec{DType::kF32, {}});
  dloss.set(0, 2.0);
  const std::vector<double> c = lsce_vjp_row_weights(p, labels, dloss);
  CHECK(c == std::vector<double>{0.5, 0.0, 0.0, 0.5});  // the mean divides by B = 4
  Tensor wrong(TensorSpec{DType::kF32, {4}});
  try {
    lsce_vjp_row_weights(p, labels, wrong);
    FAIL("a dloss of the wrong shape was accepted");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "dloss");
  }
  CHECK_THROWS_AS(lsce_vjp_row_weights(p, Tensor(TensorSpec{DType::kI32, {3}}), dloss),
                  InvalidArgument);
}

TEST_CASE("lsce_vjp's oracle matches central finite differences of the forward", "[lsce_vjp]") {
  // f64 tensors: exact perturbations. Every reduction, with and without padding rows; H = 1 and
  // V = 1 (a single class: zero gradient through the softmax, the oracle must say so exactly).
  for (const char* reduction : {"none", "sum", "mean"}) {
    CAPTURE(reduction);
    check_vjp_by_finite_differences(vjp_op(), lsce_vjp_json("f64[6,5]", "f64[5,9]", reduction), 1,
                                    30);
    check_vjp_by_finite_differences(vjp_op(),
                                    lsce_vjp_json("f64[10,4]", "f64[4,7]", reduction, 0.4), 2, 30);
  }
  check_vjp_by_finite_differences(vjp_op(), lsce_vjp_json("f64[5,1]", "f64[1,6]", "sum"), 3, 20);
  check_vjp_by_finite_differences(vjp_op(), lsce_vjp_json("f64[3,4]", "f64[4,2]", "mean"), 4, 20);
  // The residual lse is an input the gradient does not depend on (it is a function of x, w).
  json with_lse = lsce_vjp_json("f64[6,5]", "f64[5,9]", "mean", 0.3);
  with_lse["lse"] = "f32[6]";
  check_vjp_by_finite_differences(vjp_op(), with_lse, 5, 20);
}

TEST_CASE("the lsce_vjp reference passes the oracle's bound", "[lsce_vjp]") {
  const Implementation& reference = vjp_op().implementation("reference");
  for (const json& args_json : {json(kSum), lsce_vjp_json("f32[33,20]", "f32[20,301]", "none"),
                                lsce_vjp_json("f32[17,64]", "f32[64,130]", "mean", 0.3),
                                lsce_vjp_json("bf16[12,48]", "bf16[48,77]", "mean"),
                                lsce_vjp_json("f16[9,16]", "f16[16,50]", "sum", 0.5),
                                lsce_vjp_json("f32[8,24]", "bf16[24,40]", "none"),
                                lsce_vjp_json("f64[6,8]", "f64[8,10]", "sum")}) {
    const BoundArgs args = vjp_op().bind(args_json);
    const TensorMap inputs = vjp_op().make_inputs(args, 5);
    check_lsce_vjp_outputs(args, inputs, run_lsce_vjp(reference, args, inputs, {}));
  }
}

TEST_CASE("lsce_vjp gives rows with a label outside 0..V-1 no gradient", "[lsce_vjp]") {
  const BoundArgs args = vjp_op().bind(lsce_vjp_json("f32[6,8]", "f32[8,11]", "none"));
  TensorMap inputs = vjp_op().make_inputs(args, 7);
  int32_t* label = inputs.at("labels").data<int32_t>();
  label[2] = 11;  // = V
  label[3] = -5;
  const TensorMap out = run_lsce_vjp(vjp_op().implementation("reference"), args, inputs, {});
  for (int64_t h = 0; h < 8; ++h) {
    CHECK(out.at("dx").get(2 * 8 + h) == 0.0);
    CHECK(out.at("dx").get(3 * 8 + h) == 0.0);
  }
  check_lsce_vjp_outputs(args, inputs, out);
}

TEST_CASE("lsce_vjp's error model rejects a perturbed gradient", "[lsce_vjp]") {
  for (const char* reduction : {"none", "mean"}) {
    const BoundArgs args = vjp_op().bind(lsce_vjp_json("f32[40,48]", "f32[48,300]", reduction));
    const TensorMap inputs = vjp_op().make_inputs(args, 2);
    const Implementation& reference = vjp_op().implementation("reference");
    for (const char* name : {"dx", "dw"}) {
      CAPTURE(reduction, name);
      TensorMap outputs = run_lsce_vjp(reference, args, inputs, {});
      Tensor& out = outputs.at(name);
      // The largest element, off by 2^-12 of itself: inside the 1e-3 a test of shapes alone
      // would pick, and outside the bound.
      std::vector<int64_t> all(static_cast<size_t>(out.num_elements()));
      std::iota(all.begin(), all.end(), int64_t{0});
      int64_t i = 0;
      for (int64_t k : all) {
        if (std::fabs(out.get(k)) > std::fabs(out.get(i))) i = k;
      }
      REQUIRE(out.get(i) != 0.0);
      out.set(i, out.get(i) * (1.0 + std::ldexp(1.0, -12)));
      std::vector<int64_t> index = {i};
      const Comparison c = compare_to_oracle(out, vjp_op().oracle(args, inputs, name, index),
                                             vjp_op().error_model(args));
      CAPTURE(c.worst_ratio);
      CHECK(c.violations == 1);
    }
  }
}

TEST_CASE("tokamax::linear_softmax_cross_entropy_loss_vjp returns both gradients", "[lsce_vjp]") {
  const BoundArgs args = vjp_op().bind(lsce_vjp_json("f32[12,16]", "f32[16,50]", "mean"));
  const TensorMap inputs = vjp_op().make_inputs(args, 4);
  LinearSoftmaxCrossEntropyVjpOptions options;
  options.reduction = LsceReduction::kMean;
  for (const char* impl : {"auto", "reference", "cpu"}) {
    CAPTURE(impl);
    options.implementation = impl;
    const LinearSoftmaxCrossEntropyGradients grads = linear_softmax_cross_entropy_loss_vjp(
        inputs.at("x"), inputs.at("labels"), inputs.at("w"), inputs.at("dloss"), options);
    TensorMap outputs = {{"dx", grads.dx}, {"dw", grads.dw}};
    check_lsce_vjp_outputs(args, inputs, outputs);
  }
  // With the forward's residual: the same gradients.
  const LinearSoftmaxCrossEntropyOptions forward_options = [] {
    LinearSoftmaxCrossEntropyOptions o;
    o.reduction = LsceReduction::kMean;
    return o;
  }();
  const Tensor lse = linear_softmax_cross_entropy_loss_with_residuals(
                         inputs.at("x"), inputs.at("labels"), inputs.at("w"), forward_options)
                         .lse;
  for (const char* impl : {"auto", "reference", "cpu"}) {
    CAPTURE(impl);
    options.implementation = impl;
    const LinearSoftmaxCrossEntropyGradients grads = linear_softmax_cross_entropy_loss_vjp(
        inputs.at("x"), inputs.at("labels"), inputs.at("w"), inputs.at("dloss"), options, &lse);
    TensorMap outputs = {{"dx", grads.dx}, {"dw", grads.dw}};
    check_lsce_vjp_outputs(args, inputs, outputs);
  }
  // A per-row dloss for a scalar loss.
  options.implementation = "auto";
  CHECK_THROWS_AS(
      linear_softmax_cross_entropy_loss_vjp(inputs.at("x"), inputs.at("labels"), inputs.at("w"),
                                            inputs.at("labels"), options),
      InvalidArgument);
}
