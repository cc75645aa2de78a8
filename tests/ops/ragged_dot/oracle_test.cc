// Tests for ragged_dot's and ragged_dot_vjp's float64 oracles: the blocked method against the
// plain loop, over ragged groups (empty ones, group_offset, rows past the groups), tails off the
// tile sizes, every epilogue and quantized weights.
#include "ops/ragged_dot/oracle.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ops/ragged_dot/api.h"
#include "ops/ragged_dot/vjp/api.h"
#include "tests/ops/oracle_methods.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using nlohmann::json;

namespace {

void check_forward(const json& args_json) {
  CAPTURE(args_json.dump());
  const RaggedDotOp& op = ragged_dot_op();
  const BoundArgs args = op.bind(args_json);
  const TensorMap inputs = op.make_inputs(args, 7);
  testing::check_oracle_methods(
      op, args, [&](const std::string&, std::span<const int64_t> index, OracleMethod method) {
        return ragged_dot_oracle(args, inputs, index, method);
      });
}

void check_vjp(const json& args_json) {
  CAPTURE(args_json.dump());
  const RaggedDotVjpOp& op = ragged_dot_vjp_op();
  const BoundArgs args = op.bind(args_json);
  const TensorMap inputs = op.make_inputs(args, 9);
  testing::check_oracle_methods(
      op, args,
      [&](const std::string& output, std::span<const int64_t> index, OracleMethod method) {
        return ragged_dot_vjp_oracle(args, inputs, output, index, method);
      });
}

}  // namespace

TEST_CASE("ragged_dot blocked oracle matches the plain loop", "[ragged_dot][oracle]") {
  // Tails: K = 131 and 260 (not multiples of the 128-deep K block or of any SIMD width), N = 45
  // and 300 (partial strips, two column tiles), M past two row tiles; empty groups first, in the
  // middle and last; rows past the groups' sum.
  check_forward(
      {{"lhs", "f32[61,131]"}, {"rhs", "f32[4,131,45]"}, {"group_sizes", {0, 23, 0, 30}}});
  check_forward({{"lhs", "bf16[150,260]"},
                 {"rhs", "bf16[3,260,300]"},
                 {"group_sizes", {97, 1, 52}},
                 {"preferred_element_type", "f32"}});
  check_forward({{"lhs", "f16[20,7]"},
                 {"rhs", "f16[2,7,5]"},
                 {"group_sizes", {0, 19}},
                 {"preferred_element_type", "f16"}});
}

TEST_CASE("ragged_dot blocked oracle matches the plain loop with every epilogue argument",
          "[ragged_dot][oracle]") {
  const json base = {{"lhs", "bf16[60,48]"},
                     {"rhs", "bf16[3,48,40]"},
                     {"group_sizes", {0, 13, 20, 19, 0}},
                     {"group_offset", 1},
                     {"preferred_element_type", "f32"}};
  for (const char* act : {"silu", "gelu", "relu"}) {
    json c = base;
    c["activation"] = act;
    c["rhs_bias"] = "f32[3,40]";
    check_forward(c);
  }
  for (const char* gate_up :
       {"silu", "gelu_erf", "swigluoai", "silu_and_mul_with_clamp", "situ:4:none", "situ:2:0.5"}) {
    json c = base;
    c["fuse_gateup_activation"] = gate_up;
    c["rhs_bias"] = "bf16[3,40]";
    check_forward(c);
  }
  json kept = base;
  kept["zero_initialize"] = false;
  check_forward(kept);
}

TEST_CASE("ragged_dot blocked oracle matches the plain loop with quantized weights",
          "[ragged_dot][oracle]") {
  for (const char* codes : {"i8", "f8e4m3"}) {
    for (bool quantize_lhs : {false, true}) {
      json c = {{"lhs", "bf16[40,64]"},
                {"rhs", std::string(codes) + "[2,64,24]"},
                {"rhs_scale", "f32[2,4,24]"},
                {"group_sizes", {15, 25}},
                {"preferred_element_type", "f32"}};
      if (quantize_lhs) c["maybe_quantize_lhs"] = true;
      check_forward(c);
    }
  }
  check_forward({{"lhs", "f32[33,32]"},
                 {"rhs", "i8[2,32,20]"},
                 {"rhs_scale", "f32[2,20]"},
                 {"group_sizes", {0, 33}}});
}

TEST_CASE("ragged_dot blocked oracle matches the plain loop on every SIMD target",
          "[ragged_dot][oracle]") {
  testing::for_each_forced_target({HWY_AVX2, HWY_SCALAR}, [](int64_t) {
    check_forward({{"lhs", "f32[53,70]"}, {"rhs", "f32[2,70,37]"}, {"group_sizes", {31, 20}}});
  });
}

TEST_CASE("ragged_dot_vjp blocked oracle matches the plain loop", "[ragged_dot_vjp][oracle]") {
  check_vjp({{"lhs", "f32[61,131]"},
             {"rhs", "f32[4,131,45]"},
             {"dout", "f32[61,45]"},
             {"group_sizes", {0, 23, 0, 30}}});
  check_vjp({{"lhs", "bf16[90,40]"},
             {"rhs", "bf16[3,40,70]"},
             {"dout", "bf16[90,70]"},
             {"group_sizes", {0, 60, 17, 13, 0}},
             {"group_offset", 1}});
  testing::for_each_forced_target({HWY_AVX2, HWY_SCALAR}, [](int64_t) {
    check_vjp({{"lhs", "f64[30,17]"},
               {"rhs", "f64[2,17,9]"},
               {"dout", "f64[30,9]"},
               {"group_sizes", {12, 18}}});
  });
}
