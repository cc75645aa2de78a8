// Tests for dot_product_attention_vjp's spec: binding and its errors, the oracle against central
// finite differences for every forward option, the reference against the oracle, and that the
// error model rejects a perturbed gradient.
#include "ops/dot_product_attention/vjp/base.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "ops/dot_product_attention/api.h"
#include "ops/dot_product_attention/vjp/api.h"
#include "ops/framework/errors.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/dot_product_attention/vjp/test_util.h"
#include "tests/ops/vjp_test_util.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const json kBase = {{"q", "bf16[2,16,4,8]"},
                    {"k", "bf16[2,20,2,8]"},
                    {"v", "bf16[2,20,2,8]"},
                    {"bias", "f32[1,4,16,20]"},
                    {"dout", "bf16[2,16,4,8]"}};

}  // namespace

TEST_CASE("dot_product_attention_vjp binds the forward's args plus dout and lse",
          "[attention_vjp]") {
  const BoundArgs bound = dot_product_attention_vjp_op().bind(kBase);
  CHECK(bound.op == "dot_product_attention_vjp");
  CHECK_FALSE(bound.has("lse"));  // the optional input stays out of the cache key
  const std::vector<TensorDecl> outputs = dot_product_attention_vjp_op().outputs(bound);
  REQUIRE(outputs.size() == 4);
  CHECK(outputs[0].name == "dq");
  CHECK(outputs[0].spec.to_string() == "bf16[2,16,4,8]");
  CHECK(outputs[1].spec.to_string() == "bf16[2,20,2,8]");
  CHECK(outputs[3].name == "dbias");
  CHECK(outputs[3].spec.to_string() == "f32[1,4,16,20]");
  CHECK(dot_product_attention_vjp_op().primal() == &dot_product_attention_op());
  json with_lse = kBase;
  with_lse["lse"] = "f32[2,4,16]";
  const BoundArgs lse_bound = dot_product_attention_vjp_op().bind(with_lse);
  CHECK(lse_bound.option("lse") == "f32[2,4,16]");
  CHECK(AttentionVjpProblem::from(lse_bound).has_lse);
  const std::vector<TensorDecl> inputs = dot_product_attention_vjp_op().inputs(lse_bound);
  CHECK(inputs.back().name == "lse");
  // Without a bias there is no dbias.
  json plain = kBase;
  plain.erase("bias");
  CHECK(dot_product_attention_vjp_op().outputs(dot_product_attention_vjp_op().bind(plain)).size() ==
        3);
  // FLOPs: 2 (3 D + 2 d) per visible entry and q head; a local window counts its entries (rows
  // r of T = 16 see keys [r - 3, r] of t = 20: 1 + 2 + 3 + 4 * 13), causal half of T t.
  const double per_entry = 2.0 * 4 * (3 * 8 + 2 * 8);
  json causal = plain;
  causal["is_causal"] = true;
  CHECK(dot_product_attention_vjp_op().flops(dot_product_attention_vjp_op().bind(causal)) ==
        per_entry * 2 * 16 * 20 / 2);
  json window = plain;
  window["local_window"] = {3, 0};
  CHECK(dot_product_attention_vjp_op().flops(dot_product_attention_vjp_op().bind(window)) ==
        per_entry * 2 * (1 + 2 + 3 + 4 * 13));
}

TEST_CASE("dot_product_attention_vjp bind errors name the offending argument", "[attention_vjp]") {
  CHECK(bind_error_field(dot_product_attention_vjp_op(), kBase) == "<no error>");
  json missing = kBase;
  missing.erase("dout");
  CHECK(bind_error_field(dot_product_attention_vjp_op(), missing) == "dout");
  json shape = kBase;
  shape["dout"] = "bf16[2,16,4,9]";
  CHECK(bind_error_field(dot_product_attention_vjp_op(), shape) == "dout");
  json dtype = kBase;
  dtype["dout"] = "f32[2,16,4,8]";
  CHECK(bind_error_field(dot_product_attention_vjp_op(), dtype) == "dout");
  json heads = kBase;
  heads["k"] = "bf16[2,20,3,8]";
  heads["v"] = "bf16[2,20,3,8]";
  CHECK(bind_error_field(dot_product_attention_vjp_op(), heads) == "k");
  json bias = kBase;
  bias["bias"] = "f32[3,4,16,20]";
  CHECK(bind_error_field(dot_product_attention_vjp_op(), bias) == "bias");
  json lse = kBase;
  lse["lse"] = "f32[2,16,4]";
  CHECK(bind_error_field(dot_product_attention_vjp_op(), lse) == "lse");
  lse["lse"] = "bf16[2,4,16]";
  CHECK(bind_error_field(dot_product_attention_vjp_op(), lse) == "lse");
  lse["lse"] = 3;
  CHECK(bind_error_field(dot_product_attention_vjp_op(), lse) == "lse");
  json out = kBase;
  out["out"] = "f32[2,16,4,8]";
  CHECK(bind_error_field(dot_product_attention_vjp_op(), out) == "out");
  out["out"] = "bf16[2,16,4,8]";
  CHECK(bind_error_field(dot_product_attention_vjp_op(), out) == "<no error>");
  json unknown = kBase;
  unknown["window"] = 3;
  CHECK(bind_error_field(dot_product_attention_vjp_op(), unknown) == "window");
  try {
    dot_product_attention_vjp_op().bind(missing);
    FAIL("no error");
  } catch (const InvalidArgument& e) {
    CHECK(std::string(e.what()).rfind("dot_product_attention_vjp: ", 0) == 0);
  }
}

TEST_CASE("dot_product_attention_vjp's oracle matches central finite differences",
          "[attention_vjp]") {
  // f64 tensors: exact perturbations; every option (plain, GQA + causal, local window, sequence
  // lengths with an empty batch, bool mask, two bias broadcasts, soft cap, all at once).
  for (const json& args : attention_vjp_cases("f64")) {
    check_vjp_by_finite_differences(dot_product_attention_vjp_op(), args, 1, 16);
  }
  // lse and out as inputs change nothing the oracle computes.
  json with_lse = attention_vjp_cases("f64")[1];
  with_lse["lse"] = "f32[1,6,12]";
  with_lse["out"] = "f64[1,12,6,8]";
  check_vjp_by_finite_differences(dot_product_attention_vjp_op(), with_lse, 3, 8);
}

TEST_CASE("the dot_product_attention_vjp reference passes the oracle's bound", "[attention_vjp]") {
  const Implementation& reference = dot_product_attention_vjp_op().implementation("reference");
  for (const std::string dtype : {"f32", "bf16", "f16", "f64"}) {
    for (const json& args_json : attention_vjp_cases(dtype)) {
      const BoundArgs args = bind_attention_vjp(args_json);
      const TensorMap inputs = dot_product_attention_vjp_op().make_inputs(args, 5);
      check_attention_vjp_outputs(args, inputs, run_attention_vjp(reference, args, inputs));
    }
  }
}

TEST_CASE("dot_product_attention_vjp's make_inputs computes lse and out as the forward does",
          "[attention_vjp]") {
  json args_json = attention_vjp_cases("f32")[3];  // with an empty batch
  args_json["lse"] = "f32[3,2,10]";
  args_json["out"] = "f32[3,10,2,8]";
  const BoundArgs args = bind_attention_vjp(args_json);
  const TensorMap inputs = dot_product_attention_vjp_op().make_inputs(args, 2);
  const Tensor& lse = inputs.at("lse");
  // Batch 1 sees no key: -inf; batch 0 row 0 (causal) sees key 0 only: lse = its logit.
  CHECK(std::isinf(lse.get((1 * 2 + 0) * 10 + 3)));
  const Tensor& q = inputs.at("q");
  const Tensor& k = inputs.at("k");
  double dot = 0.0;
  for (int x = 0; x < 8; ++x) dot += q.get(x) * k.get(x);
  CHECK(lse.get(0) == Approx(dot / std::sqrt(8.0)).epsilon(1e-6));
  // Row 0 sees key 0 only: out = v[0]; the forward's oracle agrees everywhere.
  const Tensor& out = inputs.at("out");
  CHECK(out.get(3) == Approx(inputs.at("v").get(3)).epsilon(1e-6));
  const BoundArgs forward =
      primal_args(dot_product_attention_op(), args, dot_product_attention_vjp_op().cotangents());
  std::vector<int64_t> all(static_cast<size_t>(out.num_elements()));
  for (size_t e = 0; e < all.size(); ++e) all[e] = static_cast<int64_t>(e);
  const OracleSample oracle = dot_product_attention_op().oracle(forward, inputs, "out", all);
  for (size_t e = 0; e < all.size(); ++e) CHECK(out.get(all[e]) == Approx(oracle.value[e]));
}

TEST_CASE("dot_product_attention_vjp's error model rejects a perturbed gradient",
          "[attention_vjp]") {
  const BoundArgs args = bind_attention_vjp({{"q", "f32[1,40,2,16]"},
                                             {"k", "f32[1,48,2,16]"},
                                             {"v", "f32[1,48,2,16]"},
                                             {"bias", "f32[2,40,48]"},
                                             {"dout", "f32[1,40,2,16]"}});
  const TensorMap inputs = dot_product_attention_vjp_op().make_inputs(args, 2);
  const Implementation& reference = dot_product_attention_vjp_op().implementation("reference");
  for (const char* name : {"dq", "dk", "dv", "dbias"}) {
    CAPTURE(name);
    TensorMap outputs = run_attention_vjp(reference, args, inputs);
    Tensor& out = outputs.at(name);
    // 2^-12 relative and absolute at one element: inside a shape test's 1e-3, outside the bound.
    const int64_t i = out.num_elements() / 3;
    out.set(i, out.get(i) * (1.0 + std::ldexp(1.0, -12)) + std::ldexp(1.0, -12));
    const std::vector<int64_t> index = {i};
    const Comparison c =
        compare_to_oracle(out, dot_product_attention_vjp_op().oracle(args, inputs, name, index),
                          dot_product_attention_vjp_op().error_model(args));
    CHECK(c.violations == 1);
  }
}

TEST_CASE("tokamax::dot_product_attention_vjp returns every gradient", "[attention_vjp]") {
  const BoundArgs args = bind_attention_vjp(kBase);
  const TensorMap inputs = dot_product_attention_vjp_op().make_inputs(args, 4);
  DotProductAttentionOptions options;
  options.bias = inputs.at("bias");
  const AttentionGradients grads = dot_product_attention_vjp(
      inputs.at("q"), inputs.at("k"), inputs.at("v"), inputs.at("dout"), options);
  REQUIRE(grads.dbias.has_value());
  check_attention_vjp_outputs(
      args, inputs,
      {{"dq", grads.dq}, {"dk", grads.dk}, {"dv", grads.dv}, {"dbias", *grads.dbias}});
}
