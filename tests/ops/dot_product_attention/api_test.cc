// Tests for tokamax::dot_product_attention, the high-level entry point.
#include "ops/dot_product_attention/api.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "ops/framework/errors.h"
#include "tests/ops/dot_product_attention/attention_test_util.h"

using namespace tokamax;
using namespace tokamax::attention_testing;
using nlohmann::json;

TEST_CASE("dot_product_attention api matches the reference with every option", "[attention]") {
  const BoundArgs args = bind_args({{"q", "f32[2,20,4,16]"},
                                    {"k", "f32[2,24,2,16]"},
                                    {"v", "f32[2,24,2,8]"},
                                    {"is_causal", true},
                                    {"logits_soft_cap", 3.0},
                                    {"bias", "f32[4,20,24]"},
                                    {"mask", "bool[2,1,1,24]"},
                                    {"q_seq_lengths", {20, 9}},
                                    {"kv_seq_lengths", {24, 0}},
                                    {"local_window", {6, 2}},
                                    {"logits_scale", 0.3}});
  const TensorMap inputs = dot_product_attention_op().make_inputs(args, 4);
  DotProductAttentionOptions options;
  options.is_causal = true;
  options.logits_soft_cap = 3.0;
  options.bias = inputs.at("bias");
  options.mask = inputs.at("mask");
  options.q_seq_lengths = std::vector<int64_t>{20, 9};
  options.kv_seq_lengths = std::vector<int64_t>{24, 0};
  options.local_window = std::make_pair(int64_t{6}, int64_t{2});
  options.logits_scale = 0.3;
  const Tensor out = dot_product_attention(inputs.at("q"), inputs.at("k"), inputs.at("v"), options);
  CHECK(out.spec().to_string() == "f32[2,20,4,8]");
  CHECK(judge(compare_all(args, inputs, out)) == Disposition::kPassed);

  options.implementation = "reference";
  const Tensor ref = dot_product_attention(inputs.at("q"), inputs.at("k"), inputs.at("v"), options);
  CHECK(judge(compare_all(args, inputs, ref)) == Disposition::kPassed);
}

TEST_CASE("dot_product_attention api errors name the argument", "[attention]") {
  const Tensor q(parse_tensor_spec("f32[1,4,2,8]"));
  const Tensor k(parse_tensor_spec("f32[1,5,2,8]"));
  const Tensor bad_v(parse_tensor_spec("f32[1,6,2,8]"));
  try {
    dot_product_attention(q, k, bad_v);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "v");
  }
  DotProductAttentionOptions options;
  options.mask = Tensor(parse_tensor_spec("f32[4,5]"));
  try {
    dot_product_attention(q, k, k, options);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "mask");
  }
}
