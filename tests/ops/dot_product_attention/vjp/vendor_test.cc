// Tests for the oneDNN composite of dot_product_attention_vjp: against the float64 oracle where
// it runs (f32, bf16; plain, GQA, causal with T != t), NotImplemented for what it does not wire.
#include <catch2/catch.hpp>
#include <string>

#include "ops/dot_product_attention/vjp/api.h"
#include "ops/framework/errors.h"
#include "tests/ops/dot_product_attention/vjp/test_util.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

TEST_CASE("onednn dot_product_attention_vjp matches the oracle", "[attention_vjp]") {
  const Implementation& onednn = dot_product_attention_vjp_op().implementation("onednn");
  for (const std::string dtype : {"f32", "bf16"}) {
    for (const json& args_json : {attention_vjp_cases(dtype)[0], attention_vjp_cases(dtype)[1]}) {
      const BoundArgs args = bind_attention_vjp(args_json);
      try {
        check_args(onednn, args);
      } catch (const NotImplemented& e) {
        WARN("skipped: " << e.what());
        continue;
      }
      const TensorMap inputs = dot_product_attention_vjp_op().make_inputs(args, 4);
      check_attention_vjp_outputs(args, inputs, run_attention_vjp(onednn, args, inputs));
    }
  }
}

TEST_CASE("onednn dot_product_attention_vjp declines what the composite does not wire",
          "[attention_vjp]") {
  const Implementation& onednn = dot_product_attention_vjp_op().implementation("onednn");
  const std::vector<json> cases = attention_vjp_cases("f32");
  for (size_t c = 2; c < cases.size(); ++c) {  // window, lengths, mask, bias, cap, everything
    CAPTURE(cases[c].dump());
    CHECK_THROWS_AS(check_args(onednn, bind_attention_vjp(cases[c])), NotImplemented);
  }
  CHECK_THROWS_AS(check_args(onednn, bind_attention_vjp(attention_vjp_cases("f16")[0])),
                  NotImplemented);
}
