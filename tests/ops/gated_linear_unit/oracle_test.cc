// Tests for gated_linear_unit's and gated_linear_unit_vjp's float64 oracles: the blocked method
// against the plain loop, fused and unfused weights, tails off the tile sizes, every gradient.
#include "ops/gated_linear_unit/oracle.h"

#include <catch2/catch.hpp>
#include <string>

#include "ops/gated_linear_unit/api.h"
#include "ops/gated_linear_unit/vjp/api.h"
#include "tests/ops/oracle_methods.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using nlohmann::json;

namespace {

void check_forward(const json& args_json) {
  CAPTURE(args_json.dump());
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  const BoundArgs args = op.bind(args_json);
  const TensorMap inputs = op.make_inputs(args, 3);
  testing::check_oracle_methods(
      op, args, [&](const std::string&, std::span<const int64_t> index, OracleMethod method) {
        return gated_linear_unit_oracle(args, inputs, index, method);
      });
}

void check_vjp(const json& args_json) {
  CAPTURE(args_json.dump());
  const GatedLinearUnitVjpOp& op = gated_linear_unit_vjp_op();
  const BoundArgs args = op.bind(args_json);
  const TensorMap inputs = op.make_inputs(args, 4);
  testing::check_oracle_methods(
      op, args,
      [&](const std::string& output, std::span<const int64_t> index, OracleMethod method) {
        return gated_linear_unit_vjp_oracle(args, inputs, output, index, method);
      });
}

}  // namespace

TEST_CASE("gated_linear_unit blocked oracle matches the plain loop",
          "[gated_linear_unit][oracle]") {
  // M past two row tiles, K past a K block and off every SIMD width, N off the strip width.
  check_forward({{"x", "f32[2,60,131]"}, {"weights", "f32[131,2,45]"}, {"activation", "gelu"}});
  check_forward({{"x", "bf16[30,64]"}, {"weights", "bf16[64,2,24]"}, {"activation", "silu"}});
  check_forward({{"x", "f16[7,5]"},
                 {"gate_weights", "f16[5,9]"},
                 {"proj_weights", "f16[5,9]"},
                 {"activation", "sigmoid"}});
  testing::for_each_forced_target({HWY_AVX2, HWY_SCALAR}, [](int64_t) {
    check_forward({{"x", "f64[19,12]"}, {"weights", "f64[12,2,7]"}, {"activation", "gelu_tanh"}});
  });
}

TEST_CASE("gated_linear_unit_vjp blocked oracle matches the plain loop",
          "[gated_linear_unit_vjp][oracle]") {
  check_vjp({{"x", "f32[3,20,33]"},
             {"weights", "f32[33,2,17]"},
             {"activation", "gelu"},
             {"dout", "f32[3,20,17]"}});
  check_vjp({{"x", "bf16[40,24]"},
             {"gate_weights", "bf16[24,10]"},
             {"proj_weights", "bf16[24,10]"},
             {"activation", "relu"},
             {"dout", "bf16[40,10]"}});
  testing::for_each_forced_target({HWY_AVX2, HWY_SCALAR}, [](int64_t) {
    check_vjp({{"x", "f64[9,12]"}, {"weights", "f64[12,2,7]"}, {"dout", "f64[9,7]"}});
  });
}
