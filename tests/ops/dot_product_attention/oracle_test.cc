// Tests for dot_product_attention's and its VJP's float64 oracles: the blocked method against
// the plain loop with every option (GQA, causal, local window, sequence lengths, soft cap, bias,
// mask, the residuals and the out / lse inputs of the VJP).
#include "ops/dot_product_attention/oracle.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ops/dot_product_attention/api.h"
#include "ops/dot_product_attention/vjp/api.h"
#include "tests/ops/oracle_methods.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using nlohmann::json;

namespace {

std::vector<json> option_cases() {
  return {
      {{"q", "f32[2,50,4,20]"}, {"k", "f32[2,70,2,20]"}, {"v", "f32[2,70,2,9]"}},
      {{"q", "bf16[1,20,4,16]"},
       {"k", "bf16[1,20,1,16]"},
       {"v", "bf16[1,20,1,16]"},
       {"is_causal", true}},
      {{"q", "f16[2,9,2,8]"},
       {"k", "f16[2,13,2,8]"},
       {"v", "f16[2,13,2,8]"},
       {"q_seq_lengths", {9, 4}},
       {"kv_seq_lengths", {0, 6}}},
      {{"q", "f32[1,24,2,16]"},
       {"k", "f32[1,24,2,16]"},
       {"v", "f32[1,24,2,16]"},
       {"logits_soft_cap", 4.0},
       {"local_window", {5, 2}}},
      {{"q", "bf16[3,12,2,8]"},
       {"k", "bf16[3,15,2,8]"},
       {"v", "bf16[3,15,2,8]"},
       {"bias", "bf16[2,12,15]"},
       {"mask", "bool[3,1,1,15]"}},
  };
}

void check_forward(json args_json) {
  args_json["return_residuals"] = true;
  CAPTURE(args_json.dump());
  const DotProductAttentionOp& op = dot_product_attention_op();
  const BoundArgs args = op.bind(args_json);
  const TensorMap inputs = op.make_inputs(args, 2);
  testing::check_oracle_methods(
      op, args,
      [&](const std::string& output, std::span<const int64_t> index, OracleMethod method) {
        return dot_product_attention_oracle(args, inputs, output, index, method);
      });
}

// The forward's args plus a cotangent (and out, for its rounding term).
void check_vjp(json args_json, bool with_out) {
  const std::string q = args_json.at("q").get<std::string>(),
                    v = args_json.at("v").get<std::string>();
  // dout: q's dims with v's head size.
  TensorSpec dout = parse_tensor_spec(q);
  dout.dims.back() = parse_tensor_spec(v).dims.back();
  args_json["dout"] = dout.to_string();
  if (with_out) args_json["out"] = dout.to_string();
  CAPTURE(args_json.dump());
  const DotProductAttentionVjpOp& op = dot_product_attention_vjp_op();
  const BoundArgs args = op.bind(args_json);
  const TensorMap inputs = op.make_inputs(args, 3);
  testing::check_oracle_methods(
      op, args,
      [&](const std::string& output, std::span<const int64_t> index, OracleMethod method) {
        return dot_product_attention_vjp_oracle(args, inputs, output, index, method);
      });
}

}  // namespace

TEST_CASE("dot_product_attention blocked oracle matches the plain loop", "[attention][oracle]") {
  for (const json& c : option_cases()) check_forward(c);
  testing::for_each_forced_target({HWY_AVX2, HWY_SCALAR}, [](int64_t) {
    check_forward({{"q", "f64[1,10,2,8]"},
                   {"k", "f64[1,10,2,8]"},
                   {"v", "f64[1,10,2,8]"},
                   {"is_causal", true},
                   {"bias", "f32[10,10]"}});
  });
}

TEST_CASE("dot_product_attention_vjp blocked oracle matches the plain loop",
          "[attention_vjp][oracle]") {
  for (const json& c : option_cases()) check_vjp(c, false);
  check_vjp(option_cases()[1], true);
}
