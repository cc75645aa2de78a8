// Shared by the dot_product_attention_vjp tests: cases covering every forward option, and the
// generic runner and oracle check of tests/ops/vjp_test_util.h bound to this op.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "ops/dot_product_attention/vjp/api.h"
#include "tests/ops/vjp_test_util.h"

namespace tokamax::testing {

inline BoundArgs bind_attention_vjp(const nlohmann::json& args) {
  return dot_product_attention_vjp_op().bind(args);
}

inline TensorMap run_attention_vjp(const Implementation& impl, const BoundArgs& args,
                                   const TensorMap& inputs,
                                   const nlohmann::json& config = nullptr) {
  return run_with_nan_outputs(dot_product_attention_vjp_op(), impl, args, inputs, config);
}

inline void check_attention_vjp_outputs(const BoundArgs& args, const TensorMap& inputs,
                                        const TensorMap& outputs) {
  check_outputs_against_oracle(dot_product_attention_vjp_op(), args, inputs, outputs);
}

// Small cases covering every forward option, in `dtype`.
inline std::vector<nlohmann::json> attention_vjp_cases(const std::string& dtype) {
  auto spec = [&](const std::string& dims) { return dtype + "[" + dims + "]"; };
  return {
      {{"q", spec("2,9,2,8")},
       {"k", spec("2,11,2,8")},
       {"v", spec("2,11,2,8")},
       {"dout", spec("2,9,2,8")}},
      // GQA 3, causal with T > t
      {{"q", spec("1,12,6,8")},
       {"k", spec("1,10,2,8")},
       {"v", spec("1,10,2,8")},
       {"dout", spec("1,12,6,8")},
       {"is_causal", true}},
      {{"q", spec("1,20,2,8")},
       {"k", spec("1,20,2,8")},
       {"v", spec("1,20,2,8")},
       {"dout", spec("1,20,2,8")},
       {"local_window", {3, 1}}},
      // a fully masked batch (kv length 0) and short query rows
      {{"q", spec("3,10,2,8")},
       {"k", spec("3,12,1,8")},
       {"v", spec("3,12,1,8")},
       {"dout", spec("3,10,2,8")},
       {"q_seq_lengths", {10, 4, 7}},
       {"kv_seq_lengths", {12, 0, 5}},
       {"is_causal", true}},
      {{"q", spec("2,8,2,8")},
       {"k", spec("2,9,2,8")},
       {"v", spec("2,9,2,8")},
       {"dout", spec("2,8,2,8")},
       {"mask", "bool[2,1,8,9]"}},
      // bias broadcast over batch, and per (batch, row) only
      {{"q", spec("2,8,2,8")},
       {"k", spec("2,9,2,8")},
       {"v", spec("2,9,2,8")},
       {"dout", spec("2,8,2,8")},
       {"bias", spec("1,2,8,9")}},
      {{"q", spec("2,8,2,8")},
       {"k", spec("2,9,2,8")},
       {"v", spec("2,9,2,8")},
       {"dout", spec("2,8,2,8")},
       {"bias", spec("2,1,8,1")}},
      {{"q", spec("1,10,2,8")},
       {"k", spec("1,10,2,8")},
       {"v", spec("1,10,2,8")},
       {"dout", spec("1,10,2,8")},
       {"logits_scale", 1.0},
       {"logits_soft_cap", 2.0}},
      // everything at once, d != D
      {{"q", spec("2,9,4,8")},
       {"k", spec("2,10,2,8")},
       {"v", spec("2,10,2,6")},
       {"dout", spec("2,9,4,6")},
       {"is_causal", true},
       {"logits_soft_cap", 3.0},
       {"bias", spec("4,9,10")},
       {"mask", "bool[2,4,9,10]"},
       {"local_window", {5, 2}},
       {"kv_seq_lengths", {10, 7}}},
  };
}

}  // namespace tokamax::testing
