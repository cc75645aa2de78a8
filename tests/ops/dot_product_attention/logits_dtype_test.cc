// Tests of dot_product_attention's logits_dtype: bf16 rounds the finished logits (the cpu kernel
// on every layout, the reference as upstream's chain of bf16 steps), both pass the oracle's
// bf16-logits bound and fail the f32-logits one (so the rounding happens); auto and f32 change
// nothing; other dtypes and the gradient are refused by name.
#include <catch2/catch.hpp>
#include <string>

#include "ops/dot_product_attention/api.h"
#include "ops/dot_product_attention/vjp/api.h"
#include "ops/framework/numerics.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/dot_product_attention/attention_test_util.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"

using namespace tokamax;
using namespace tokamax::testing;
using namespace tokamax::attention_testing;
using nlohmann::json;

namespace {

const DotProductAttentionOp& op() { return dot_product_attention_op(); }

}  // namespace

TEST_CASE("dot_product_attention bf16 logits round the logits, within their bound", "[attention]") {
  const Implementation& cpu = op().implementation("cpu");
  for (const json& c : {json{{"q", "f32[1,33,4,32]"},
                             {"k", "f32[1,40,2,32]"},
                             {"v", "f32[1,40,2,16]"},
                             {"logits_soft_cap", 4.0},
                             {"bias", "f32[4,33,40]"}},
                        json{{"q", "bf16[2,30,2,64]"},
                             {"k", "bf16[2,30,2,64]"},
                             {"v", "bf16[2,30,2,64]"},
                             {"is_causal", true}}}) {
    json rounded = c;
    rounded["logits_dtype"] = "bf16";
    const BoundArgs args = bind_args(rounded), exact = bind_args(c);
    CHECK(args.option("logits_dtype") == "bf16");
    const TensorMap inputs = op().make_inputs(args, 3);
    // f32 inputs: the f32-logits bound is tight enough to catch the rounding (bf16 outputs
    // allow for more than it anyway).
    const bool tight = c.at("q").get<std::string>().starts_with("f32");
    for (const char* packing : {"shared", "transposed", "per_block"}) {
      json config = heuristics_config_json(cpu, args);
      config["kv_packing"] = packing;
      config["bf16_path"] = "convert_f32";
      CAPTURE(args.key(), packing);
      CHECK(judge(run_against_oracle(op(), "cpu", args, config, inputs, args, "out")) ==
            Disposition::kPassed);
      if (tight) {
        CHECK(judge(run_against_oracle(op(), "cpu", args, config, inputs, exact, "out")) ==
              Disposition::kFailed);
      }
    }
    CHECK(judge(run_against_oracle(op(), "reference", args, json::object(), inputs, args, "out")) ==
          Disposition::kPassed);
    if (tight) {
      CHECK(judge(run_against_oracle(op(), "reference", args, json::object(), inputs, exact,
                                     "out")) == Disposition::kFailed);
    }
  }
}

TEST_CASE("dot_product_attention logits_dtype binds auto, the accumulator's and bf16 only",
          "[attention]") {
  const json ok = {{"q", "f32[1,8,2,16]"}, {"k", "f32[1,8,2,16]"}, {"v", "f32[1,8,2,16]"}};
  auto with = [&](json value) {
    json args = ok;
    args["logits_dtype"] = std::move(value);
    return args;
  };
  // auto and f32 are the default: the canonical args (and the cache key) do not change.
  CHECK(bind_args(with("auto")).key() == bind_args(ok).key());
  CHECK(bind_args(with("f32")).key() == bind_args(ok).key());
  CHECK(bind_args(with("bf16")).key() != bind_args(ok).key());
  CHECK(bind_error_field(op(), with("f16")) == "logits_dtype");
  CHECK(bind_error_field(op(), with(3)) == "logits_dtype");
  json f64 = with("bf16");
  for (const char* name : {"q", "k", "v"}) f64[name] = "f64[1,8,2,16]";
  CHECK(bind_error_field(op(), f64) == "logits_dtype");
  json vjp = with("bf16");
  vjp["dout"] = "f32[1,8,2,16]";
  CHECK(bind_error_field(dot_product_attention_vjp_op(), vjp) == "logits_dtype");
}
