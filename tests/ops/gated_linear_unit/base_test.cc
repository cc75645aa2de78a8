// Tests for gated_linear_unit's spec: binding and its errors, counts, the reference vs the oracle.
#include "ops/gated_linear_unit/base.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "cli/toolkit/catalog/arg_spec.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/gated_linear_unit/api.h"
#include "tests/ops/bind_errors.h"

using namespace tokamax;
using nlohmann::json;
using testing::bind_error_field;

TEST_CASE("gated_linear_unit bind errors name the offending argument", "[glu]") {
  const json base = {{"x", "f32[2,8,4]"}, {"weights", "f32[4,2,3]"}, {"activation", "silu"}};
  CHECK(bind_error_field(gated_linear_unit_op(), base) == "<no error>");

  json mismatched_k = base;
  mismatched_k["weights"] = "f32[5,2,3]";
  CHECK(bind_error_field(gated_linear_unit_op(), mismatched_k) == "weights");

  json not_two = base;
  not_two["weights"] = "f32[4,3,3]";
  CHECK(bind_error_field(gated_linear_unit_op(), not_two) == "weights");

  json weights_rank = base;
  weights_rank["weights"] = "f32[4,6]";
  CHECK(bind_error_field(gated_linear_unit_op(), weights_rank) == "weights");

  json x_rank = base;
  x_rank["x"] = "f32[4]";
  CHECK(bind_error_field(gated_linear_unit_op(), x_rank) == "x");

  json int_x = base;
  int_x["x"] = "i32[8,4]";
  CHECK(bind_error_field(gated_linear_unit_op(), int_x) == "x");

  json bad_activation = base;
  bad_activation["activation"] = "swish";
  CHECK(bind_error_field(gated_linear_unit_op(), bad_activation) == "activation");

  json activation_type = base;
  activation_type["activation"] = 3;
  CHECK(bind_error_field(gated_linear_unit_op(), activation_type) == "activation");

  json unknown = base;
  unknown["precison"] = "highest";
  CHECK(bind_error_field(gated_linear_unit_op(), unknown) == "precison");

  json bad_precision = base;
  bad_precision["precision"] = "bf16x3";
  CHECK(bind_error_field(gated_linear_unit_op(), bad_precision) == "precision");

  json missing = base;
  missing.erase("weights");
  CHECK(bind_error_field(gated_linear_unit_op(), missing) == "weights");

  // Unfused weights: both halves, [K, N] each, the same shape and dtype, not with weights.
  json unfused = {{"x", "f32[2,8,4]"},
                  {"gate_weights", "f32[4,3]"},
                  {"proj_weights", "f32[4,3]"},
                  {"activation", "silu"}};
  CHECK(bind_error_field(gated_linear_unit_op(), unfused) == "<no error>");
  json both = unfused;
  both["weights"] = "f32[4,2,3]";
  CHECK(bind_error_field(gated_linear_unit_op(), both) == "weights");
  json half = unfused;
  half.erase("proj_weights");
  CHECK(bind_error_field(gated_linear_unit_op(), half) == "proj_weights");
  json other_shape = unfused;
  other_shape["proj_weights"] = "f32[4,5]";
  CHECK(bind_error_field(gated_linear_unit_op(), other_shape) == "proj_weights");
  json other_dtype = unfused;
  other_dtype["proj_weights"] = "bf16[4,3]";
  CHECK(bind_error_field(gated_linear_unit_op(), other_dtype) == "proj_weights");
  json rank3 = unfused;
  rank3["gate_weights"] = "f32[4,2,3]";
  CHECK(bind_error_field(gated_linear_unit_op(), rank3) == "gate_weights");
  json k = unfused;
  k["gate_weights"] = "f32[5,3]";
  k["proj_weights"] = "f32[5,3]";
  CHECK(bind_error_field(gated_linear_unit_op(), k) == "gate_weights");
}

TEST_CASE("gated_linear_unit unfused weights hold the fused layout's values and results", "[glu]") {
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  const BoundArgs fused =
      op.bind({{"x", "bf16[2,9,40]"}, {"weights", "bf16[40,2,24]"}, {"activation", "gelu"}});
  const BoundArgs unfused = op.bind({{"x", "bf16[2,9,40]"},
                                     {"gate_weights", "bf16[40,24]"},
                                     {"proj_weights", "bf16[40,24]"},
                                     {"activation", "gelu"}});
  CHECK_FALSE(GluProblem::from(unfused).fused_weights);
  CHECK(op.flops(fused) == op.flops(unfused));
  CHECK(op.bytes(fused) == op.bytes(unfused));
  const TensorMap a = op.make_inputs(fused, 6), b = op.make_inputs(unfused, 6);
  const GluWeights wa = glu_weights(GluProblem::from(fused), a);
  const GluWeights wb = glu_weights(GluProblem::from(unfused), b);
  for (int j = 0; j < 2; ++j) {
    for (int64_t k = 0; k < 40; ++k) {
      for (int64_t n = 0; n < 24; ++n) CHECK(wa.get(j, k, n) == wb.get(j, k, n));
    }
  }
  // Every implementation: the same oracle, and within its bound on both layouts.
  std::vector<int64_t> index(2 * 9 * 24);
  std::iota(index.begin(), index.end(), 0);
  const OracleSample oracle_a = op.oracle(fused, a, "out", index);
  const OracleSample oracle_b = op.oracle(unfused, b, "out", index);
  CHECK(oracle_a.value == oracle_b.value);
  for (const Implementation* impl : op.implementations()) {
    CAPTURE(impl->name());
    const auto prepared = impl->prepare(unfused, cpu::host_device());
    try {
      prepared->check();
    } catch (const NotImplemented&) {
      continue;
    }
    TensorMap out = op.allocate_outputs(unfused);
    prepared->heuristics_kernel().run(b, out);
    CHECK(judge(compare_to_oracle(out.at("out"), oracle_b, op.error_model(unfused))) ==
          Disposition::kPassed);
  }
}

TEST_CASE("gated_linear_unit bind fills defaults and derives the problem", "[glu]") {
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  const BoundArgs args = op.bind({{"x", "bf16[3,5,7,16]"}, {"weights", "bf16[16,2,24]"}});
  CHECK(args.option("activation") == "none");
  const GluProblem p = GluProblem::from(args);
  CHECK(p.M == 105);
  CHECK(p.K == 16);
  CHECK(p.N == 24);
  CHECK(op.outputs(args)[0].spec.to_string() == "bf16[3,5,7,24]");
  CHECK(op.flops(args) == 4.0 * 105 * 16 * 24);
  CHECK(op.bytes(args) == 105 * 16 * 2 + 2 * 16 * 24 * 2 + 105 * 24 * 2);
}

TEST_CASE("gated_linear_unit reference<float> matches a hand-computed case", "[glu]") {
  // x = [[1, 2], [-1, 3]], Wg = [[1, 0], [0, 1]] (gate = x), Wp = [[2, 0], [1, 1]].
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  for (const char* activation : {"none", "relu"}) {
    CAPTURE(activation);
    const BoundArgs args =
        op.bind({{"x", "f32[2,2]"}, {"weights", "f32[2,2,2]"}, {"activation", activation}});
    const GluProblem p = GluProblem::from(args);
    Tensor x(args.tensor("x"));
    Tensor w(args.tensor("weights"));
    const double x_values[] = {1, 2, -1, 3};
    // weights[k, j, n]: k = 0: gate row [1, 0], proj row [2, 0]; k = 1: gate [0, 1], proj [1, 1].
    const double w_values[] = {1, 0, 2, 0, 0, 1, 1, 1};
    for (int i = 0; i < 4; ++i) x.set(i, x_values[i]);
    for (int i = 0; i < 8; ++i) w.set(i, w_values[i]);
    Tensor out(TensorSpec{DType::kF32, {2, 2}});
    TensorMap inputs;
    inputs.emplace("x", x);
    inputs.emplace("weights", w);
    gated_linear_unit_reference<float>(p, x, glu_weights(p, inputs), out);
    // proj = x @ Wp: row 0 = [1*2 + 2*1, 2] = [4, 2]; row 1 = [-2 + 3, 3] = [1, 3].
    const bool relu = std::string(activation) == "relu";
    const double expected[] = {1.0 * 4, 2.0 * 2, (relu ? 0.0 : -1.0) * 1, 3.0 * 3};
    for (int i = 0; i < 4; ++i) CHECK(out.get(i) == expected[i]);
  }
}

TEST_CASE("gated_linear_unit reference agrees with the float64 oracle", "[glu]") {
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  for (const json& args_json :
       {json{{"x", "f32[2,20,33]"}, {"weights", "f32[33,2,17]"}, {"activation", "gelu"}},
        json{{"x", "bf16[30,64]"}, {"weights", "bf16[64,2,24]"}, {"activation", "silu"}},
        json{{"x", "f16[16,5]"}, {"weights", "f16[5,2,8]"}, {"activation", "sigmoid"}},
        json{{"x", "f64[9,12]"}, {"weights", "f64[12,2,7]"}, {"activation", "gelu_tanh"}},
        json{{"x", "bf16[8,1]"}, {"weights", "f32[1,2,9]"}, {"activation", "relu"}},
        json{{"x", "bf16[3,12,40]"},
             {"gate_weights", "bf16[40,24]"},
             {"proj_weights", "bf16[40,24]"},
             {"activation", "silu"}}}) {
    CAPTURE(args_json.dump());
    const BoundArgs args = op.bind(args_json);
    const GluProblem p = GluProblem::from(args);
    const TensorMap inputs = op.make_inputs(args, 3);
    TensorMap outputs = op.allocate_outputs(args);
    Tensor& out = outputs.at("out");
    if (p.out_dtype() == DType::kF64) {
      gated_linear_unit_reference<double>(p, inputs.at("x"), glu_weights(p, inputs), out);
    } else {
      gated_linear_unit_reference<float>(p, inputs.at("x"), glu_weights(p, inputs), out);
    }
    std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
    std::iota(index.begin(), index.end(), 0);
    const OracleSample oracle = op.oracle(args, inputs, "out", index);
    const Comparison c = compare_to_oracle(out, oracle, op.error_model(args));
    CAPTURE(c.max_abs_error, c.bound, c.worst_ratio);
    CHECK(judge(c) == Disposition::kPassed);
  }
}

TEST_CASE("gated_linear_unit catalog covers every activation, dtype and rank, cheaply", "[glu]") {
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  auto has_tag = [](const ArgSpec& spec, const std::string& tag) {
    return std::find(spec.tags.begin(), spec.tags.end(), tag) != spec.tags.end();
  };
  std::set<std::string> activations, ranks;
  std::map<std::string, int> smoke, ci, bench;
  int primary = 0;
  for (const ArgSpec& spec : builtin_specs()) {
    if (spec.op != "gated_linear_unit") continue;
    CAPTURE(spec.name);
    CHECK(spec.source == "specs/gated_linear_unit.yaml (embedded)");
    const TensorSpec x = spec.args.tensor("x");
    const std::string dtype(dtype_name(x.dtype));
    if (has_tag(spec, "ci_tests")) {
      CHECK(op.flops(spec.args) < 50e6);
      ++ci[dtype];
      activations.insert(spec.args.option("activation").get<std::string>());
      ranks.insert(std::to_string(x.rank()));
    }
    if (has_tag(spec, "smoke")) {
      CHECK(has_tag(spec, "ci_tests"));
      ++smoke[dtype];
    }
    if (has_tag(spec, "bench_cpu")) {
      CHECK(op.flops(spec.args) >= 1e9);
      CHECK(op.flops(spec.args) <= 10e9);
      ++bench[dtype];
    }
    if (has_tag(spec, "primary")) ++primary;
  }
  CHECK(primary == 27);
  CHECK(activations.size() == 6);
  CHECK(ranks == std::set<std::string>{"2", "3", "4"});
  for (const char* dtype : {"f32", "bf16", "f16"}) {
    INFO(dtype);
    CHECK(smoke[dtype] == 1);
    CHECK(ci[dtype] >= 2);
  }
  CHECK(bench["f32"] >= 2);
  CHECK(bench["bf16"] >= 2);
}
