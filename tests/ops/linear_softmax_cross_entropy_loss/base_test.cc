// Tests for linear_softmax_cross_entropy_loss's spec: binding and its errors, label checks,
// generated inputs, the reference against a hand computation and the float64 oracle.
#include "ops/linear_softmax_cross_entropy_loss/base.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <set>
#include <string>

#include "cli/toolkit/catalog/arg_spec.h"
#include "ops/framework/errors.h"
#include "ops/linear_softmax_cross_entropy_loss/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/linear_softmax_cross_entropy_loss/test_helpers.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

TEST_CASE("lsce bind errors name the offending argument", "[lsce]") {
  const json base = {{"x", "f32[8,4]"}, {"w", "bf16[4,10]"}, {"reduction", "mean"}};
  CHECK(bind_error_field(linear_softmax_cross_entropy_loss_op(), base) == "<no error>");
  json mismatched_h = base;
  mismatched_h["w"] = "bf16[5,10]";
  CHECK(bind_error_field(linear_softmax_cross_entropy_loss_op(), mismatched_h) == "w");
  json bad_reduction = base;
  bad_reduction["reduction"] = "max";
  CHECK(bind_error_field(linear_softmax_cross_entropy_loss_op(), bad_reduction) == "reduction");
  json bad_labels = base;
  bad_labels["labels"] = "i32[7]";
  CHECK(bind_error_field(linear_softmax_cross_entropy_loss_op(), bad_labels) == "labels");
  json float_labels = base;
  float_labels["labels"] = "f32[8]";
  CHECK(bind_error_field(linear_softmax_cross_entropy_loss_op(), float_labels) == "labels");
  json unknown = base;
  unknown["logit_soft_cap"] = 30;
  CHECK(bind_error_field(linear_softmax_cross_entropy_loss_op(), unknown) == "logit_soft_cap");
  json bad_rank = base;
  bad_rank["x"] = "f32[8]";
  CHECK(bind_error_field(linear_softmax_cross_entropy_loss_op(), bad_rank) == "x");
  json int_w = base;
  int_w["w"] = "i32[4,10]";
  CHECK(bind_error_field(linear_softmax_cross_entropy_loss_op(), int_w) == "w");
  json empty_vocab = base;
  empty_vocab["w"] = "bf16[4,0]";
  CHECK(bind_error_field(linear_softmax_cross_entropy_loss_op(), empty_vocab) == "w");
  json missing = base;
  missing.erase("x");
  CHECK(bind_error_field(linear_softmax_cross_entropy_loss_op(), missing) == "x");
}

TEST_CASE("lsce bind fills defaults canonically and shapes the output", "[lsce]") {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  const BoundArgs args = op.bind({{"x", "bf16[8,4]"}, {"w", "bf16[4,10]"}});
  CHECK(args.option("reduction") == "sum");
  CHECK(args.option("labels") == "i32[8]");
  CHECK(op.outputs(args)[0].spec.to_string() == "f32[]");
  const BoundArgs none = lsce_args("f32[8,4]", "f32[4,10]", "none");
  CHECK(op.outputs(none)[0].spec.to_string() == "f32[8]");
}

TEST_CASE("lsce padded labels: generated at the asked fraction, zero loss in the oracle",
          "[lsce]") {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  json args_json = {{"x", "f32[400,8]"}, {"w", "f32[8,10]"}, {"reduction", "none"}};
  json zero_padding = args_json;
  zero_padding["padded_labels"] = 0;
  CHECK(op.bind(args_json).key() == op.bind(zero_padding).key());
  args_json["padded_labels"] = 0.25;
  const BoundArgs args = op.bind(args_json);
  const TensorMap inputs = op.make_inputs(args, 3);
  const int32_t* labels = inputs.at("labels").data<int32_t>();
  int padded = 0;
  for (int i = 0; i < 400; ++i) {
    CHECK((labels[i] == -1 || (labels[i] >= 0 && labels[i] < 10)));
    padded += labels[i] == -1;
  }
  CHECK(labels[0] == 0);  // the edge rows keep their classes
  CHECK(labels[399] == 9);
  CHECK(padded > 60);
  CHECK(padded < 140);
  std::vector<int64_t> index(400);
  std::iota(index.begin(), index.end(), 0);
  const OracleSample oracle = op.oracle(args, inputs, "loss", index);
  for (int i = 0; i < 400; ++i) {
    if (labels[i] == -1) {
      CHECK(oracle.value[i] == 0.0);
      CHECK(oracle.magnitude[i] == 0.0);
    } else {
      CHECK(oracle.value[i] > 0.0);
    }
  }
  // The mean divides the counted rows' sum by B, padding included.
  args_json["reduction"] = "sum";
  const double sum =
      op.oracle(op.bind(args_json), inputs, "loss", std::vector<int64_t>{0}).value[0];
  args_json["reduction"] = "mean";
  const double mean =
      op.oracle(op.bind(args_json), inputs, "loss", std::vector<int64_t>{0}).value[0];
  CHECK(mean == Approx(sum / 400));
  // check_lsce_labels only checks the tensor.
  const auto p = LinearSoftmaxCrossEntropyProblem::from(args);
  CHECK_NOTHROW(check_lsce_labels(p, inputs.at("labels")));
  CHECK_THROWS_WITH(check_lsce_labels(p, Tensor(TensorSpec{DType::kI32, {7}})),
                    Catch::Contains("labels must be i32[400]"));
  for (const json& bad : {json(-0.1), json(1.5), json("half")}) {
    json a = args_json;
    a["padded_labels"] = bad;
    CHECK_THROWS_AS(op.bind(a), InvalidArgument);
  }
}

TEST_CASE("lsce generated inputs have in-range labels and spread logits", "[lsce]") {
  const BoundArgs args = lsce_args("f32[64,256]", "f32[256,500]", "none");
  const TensorMap inputs = linear_softmax_cross_entropy_loss_op().make_inputs(args, 5);
  const int32_t* labels = inputs.at("labels").data<int32_t>();
  CHECK(labels[0] == 0);
  CHECK(labels[63] == 499);
  for (int i = 0; i < 64; ++i) CHECK((labels[i] >= 0 && labels[i] < 500));
  // The logits of row 1: a spread of O(1..10), not all equal.
  const Tensor& x = inputs.at("x");
  const Tensor& w = inputs.at("w");
  double lo = 1e9, hi = -1e9;
  for (int j = 0; j < 500; ++j) {
    double z = 0;
    for (int k = 0; k < 256; ++k) z += x.get(256 + k) * w.get(k * 500 + j);
    lo = std::min(lo, z);
    hi = std::max(hi, z);
  }
  CHECK(hi - lo > 5.0);
  CHECK(hi - lo < 60.0);
}

TEST_CASE("lsce reference<float> matches a hand-computed case", "[lsce]") {
  // x = [[1, 0], [0, 2]], w = I (2 x 3 with a zero column): logits [[1,0,0],[0,2,0]].
  const BoundArgs args = lsce_args("f32[2,2]", "f32[2,3]", "none");
  const auto p = LinearSoftmaxCrossEntropyProblem::from(args);
  Tensor x(args.tensor("x")), w(args.tensor("w")), labels(args.tensor("labels"));
  const double xv[] = {1, 0, 0, 2}, wv[] = {1, 0, 0, 0, 1, 0};
  for (int i = 0; i < 4; ++i) x.set(i, xv[i]);
  for (int i = 0; i < 6; ++i) w.set(i, wv[i]);
  labels.data<int32_t>()[0] = 0;
  labels.data<int32_t>()[1] = 2;
  Tensor loss(TensorSpec{DType::kF32, {2}});
  linear_softmax_cross_entropy_reference<float>(p, x, labels, w, loss);
  const double row0 = std::log(std::exp(1.0) + 2.0) - 1.0;
  const double row1 = std::log(std::exp(2.0) + 2.0) - 0.0;
  CHECK(loss.get(0) == Approx(row0).epsilon(1e-6));
  CHECK(loss.get(1) == Approx(row1).epsilon(1e-6));
  auto mean = p;
  mean.reduction = LsceReduction::kMean;
  Tensor scalar(TensorSpec{DType::kF32, {}});
  linear_softmax_cross_entropy_reference<double>(mean, x, labels, w, scalar);
  CHECK(scalar.get(0) == Approx((row0 + row1) / 2).epsilon(1e-7));  // f32 output
}

TEST_CASE("lsce reference<float> agrees with the float64 oracle within the bound", "[lsce]") {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  for (const BoundArgs& args : {lsce_args("f32[12,64]", "f32[64,300]", "none"),
                                lsce_args("bf16[10,200]", "bf16[200,700]", "sum"),
                                lsce_args("f16[6,32]", "f32[32,129]", "mean"),
                                lsce_args("f32[1,8]", "bf16[8,2]", "none")}) {
    CAPTURE(args.key());
    const TensorMap inputs = op.make_inputs(args, 3);
    TensorMap outputs = op.allocate_outputs(args);
    linear_softmax_cross_entropy_reference<float>(LinearSoftmaxCrossEntropyProblem::from(args),
                                                  inputs.at("x"), inputs.at("labels"),
                                                  inputs.at("w"), outputs.at("loss"));
    const OracleSample oracle = lsce_full_oracle(args, inputs);
    const Comparison c = compare_to_oracle(outputs.at("loss"), oracle, op.error_model(args));
    CAPTURE(c.max_abs_error, c.bound, c.worst_ratio);
    CHECK(judge(c) == Disposition::kPassed);
    // The reference<double> is the oracle itself.
    TensorMap exact = op.allocate_outputs(args);
    linear_softmax_cross_entropy_reference<double>(LinearSoftmaxCrossEntropyProblem::from(args),
                                                   inputs.at("x"), inputs.at("labels"),
                                                   inputs.at("w"), exact.at("loss"));
    for (size_t s = 0; s < oracle.index.size(); ++s) {
      CHECK(exact.at("loss").get(oracle.index[s]) ==
            Approx(oracle.value[s]).epsilon(1e-6));  // f32 output rounding
    }
  }
}

TEST_CASE("lsce catalog: small ci_tests covering every dtype and reduction", "[lsce]") {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  std::set<std::string> smoke_dtypes, ci_x_dtypes, ci_reductions;
  int primary = 0, ci = 0, bench = 0;
  bool one_row = false;
  for (const ArgSpec& spec : builtin_specs()) {
    if (spec.op != op.name()) continue;
    auto tagged = [&](const char* tag) {
      return std::find(spec.tags.begin(), spec.tags.end(), tag) != spec.tags.end();
    };
    const auto p = LinearSoftmaxCrossEntropyProblem::from(spec.args);
    const std::string x_dtype(dtype_name(p.x_dtype));
    if (tagged("smoke")) {
      CHECK(tagged("ci_tests"));
      smoke_dtypes.insert(x_dtype);
    }
    if (tagged("ci_tests")) {
      INFO(spec.name);
      CHECK(op.flops(spec.args) < 50e6);
      CHECK(!tagged("primary"));
      ++ci;
      ci_x_dtypes.insert(x_dtype);
      ci_reductions.insert(std::string(lsce_reduction_name(p.reduction)));
      one_row = one_row || p.B == 1;
    }
    if (tagged("primary")) ++primary;
    if (tagged("bench_cpu")) ++bench;
  }
  CHECK(primary == 4);
  CHECK(bench >= 2);
  CHECK(ci >= 10);
  CHECK(one_row);
  CHECK(smoke_dtypes == std::set<std::string>{"f32", "bf16", "f16"});
  CHECK(ci_x_dtypes == std::set<std::string>{"f32", "bf16", "f16"});
  CHECK(ci_reductions == std::set<std::string>{"none", "sum", "mean"});
}
