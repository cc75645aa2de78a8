// Tests for dot_product_attention's return_residuals option: binding (absent at its default, so
// cache keys do not move), lse from the reference and from every cpu layout against the float64
// oracle, the oneDNN composite's decline, and the forward's (out, lse) fed to the VJP.
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "ops/dot_product_attention/api.h"
#include "ops/dot_product_attention/vjp/api.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "tests/ops/dot_product_attention/vjp/test_util.h"
#include "tests/ops/impl_calls.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

TensorMap run_forward(const std::string& impl, const BoundArgs& args, const TensorMap& inputs,
                      const json& config = json::object()) {
  const DotProductAttentionOp& op = dot_product_attention_op();
  TensorMap outputs = op.allocate_outputs(args);
  for (auto& [name, tensor] : outputs) {
    for (int64_t e = 0; e < tensor.num_elements(); ++e) tensor.set(e, std::nan(""));
  }
  const Implementation& implementation = op.implementation(impl);
  run_json(implementation, args,
           config.empty() ? heuristics_config_json(implementation, args) : config, inputs, outputs);
  return outputs;
}

// lse against the oracle: -inf exactly where the oracle has -inf, within the bound elsewhere.
void check_lse(const BoundArgs& args, const TensorMap& inputs, const Tensor& lse) {
  const DotProductAttentionOp& op = dot_product_attention_op();
  std::vector<int64_t> index(static_cast<size_t>(lse.num_elements()));
  std::iota(index.begin(), index.end(), int64_t{0});
  const OracleSample oracle = op.oracle(args, inputs, "lse", index);
  const ErrorModel model = op.error_model(args);
  for (size_t s = 0; s < index.size(); ++s) {
    const double got = lse.get(index[s]), want = oracle.value[s];
    CAPTURE(args.key(), index[s], got, want);
    if (std::isinf(want)) {
      CHECK(got == want);
    } else {
      CHECK(std::fabs(got - want) <= error_bound(model, want, oracle.magnitude[s]));
    }
  }
}

std::vector<json> cases() {
  std::vector<json> out;
  for (const std::string dtype : {"f32", "bf16"}) {
    for (json c : attention_vjp_cases(dtype)) {
      c.erase("dout");
      c["return_residuals"] = true;
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("return_residuals binds only when true and adds the lse output", "[attention]") {
  const json base = {{"q", "f32[2,8,4,16]"}, {"k", "f32[2,9,2,16]"}, {"v", "f32[2,9,2,16]"}};
  const BoundArgs plain = dot_product_attention_op().bind(base);
  json off = base;
  off["return_residuals"] = false;
  CHECK(dot_product_attention_op().bind(off).key() == plain.key());
  CHECK_FALSE(plain.has("return_residuals"));
  CHECK(dot_product_attention_op().outputs(plain).size() == 1);
  json on = base;
  on["return_residuals"] = true;
  const std::vector<TensorDecl> outputs =
      dot_product_attention_op().outputs(dot_product_attention_op().bind(on));
  REQUIRE(outputs.size() == 2);
  CHECK(outputs[1].name == "lse");
  CHECK(outputs[1].spec.to_string() == "f32[2,4,8]");
  json bad = base;
  bad["return_residuals"] = 1;
  try {
    dot_product_attention_op().bind(bad);
    FAIL("no error");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "return_residuals");
  }
}

TEST_CASE("lse of the reference and of every cpu layout matches the oracle", "[attention]") {
  for (const json& args_json : cases()) {
    const BoundArgs args = dot_product_attention_op().bind(args_json);
    const TensorMap inputs = dot_product_attention_op().make_inputs(args, 3);
    check_lse(args, inputs, run_forward("reference", args, inputs).at("lse"));
    for (const char* packing : {"shared", "transposed", "per_block"}) {
      for (bool group : {true, false}) {
        const json config = {
            {"block_q", 3}, {"block_kv", 4}, {"group_heads", group}, {"kv_packing", packing}};
        check_lse(args, inputs, run_forward("cpu", args, inputs, config).at("lse"));
      }
    }
  }
}

TEST_CASE("the oneDNN forward declines return_residuals", "[attention]") {
  const BoundArgs args = dot_product_attention_op().bind({{"q", "f32[1,8,2,16]"},
                                                          {"k", "f32[1,8,2,16]"},
                                                          {"v", "f32[1,8,2,16]"},
                                                          {"return_residuals", true}});
  CHECK_THROWS_AS(check_args(dot_product_attention_op().implementation("onednn"), args),
                  NotImplemented);
}

TEST_CASE("the forward's out and lse drive the VJP", "[attention_vjp]") {
  for (const json& fwd_json : {cases()[1], cases().back()}) {
    const BoundArgs fwd = dot_product_attention_op().bind(fwd_json);
    TensorMap inputs = dot_product_attention_op().make_inputs(fwd, 9);
    const TensorMap forward = run_forward("cpu", fwd, inputs);
    json vjp_json = fwd_json;
    vjp_json.erase("return_residuals");
    vjp_json["dout"] = forward.at("out").spec().to_string();
    const BoundArgs plain = bind_attention_vjp(vjp_json);
    vjp_json["out"] = forward.at("out").spec().to_string();
    vjp_json["lse"] = forward.at("lse").spec().to_string();
    const BoundArgs args = bind_attention_vjp(vjp_json);
    // The cotangent as make_inputs draws it; out and lse the cpu forward's.
    TensorMap vjp_inputs = dot_product_attention_vjp_op().make_inputs(plain, 9);
    vjp_inputs["out"] = forward.at("out");
    vjp_inputs["lse"] = forward.at("lse");
    check_attention_vjp_outputs(
        args, vjp_inputs,
        run_attention_vjp(dot_product_attention_vjp_op().implementation("cpu"), args, vjp_inputs));
  }
}
