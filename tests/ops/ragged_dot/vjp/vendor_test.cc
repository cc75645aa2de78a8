// Tests for the oneDNN ragged_dot_vjp baseline: it passes the oracle where it runs and declines
// with a reason elsewhere.
#include <catch2/catch.hpp>
#include <string>

#include "ops/framework/errors.h"
#include "ops/ragged_dot/vjp/api.h"
#include "tests/ops/ragged_dot/vjp/test_util.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

TEST_CASE("onednn ragged_dot_vjp passes the oracle or declines with a reason", "[ragged_dot_vjp]") {
  const Implementation& onednn = ragged_dot_vjp_op().implementation("onednn");
  CHECK(onednn.is_vendor());
  for (const json& args_json : {json{{"lhs", "f32[64,32]"},
                                     {"rhs", "f32[4,32,48]"},
                                     {"group_sizes", {0, 7, 13, 33}},
                                     {"dout", "f32[64,48]"}},
                                json{{"lhs", "bf16[50,40]"},
                                     {"rhs", "bf16[3,40,72]"},
                                     {"group_sizes", {33, 0, 7}},
                                     {"dout", "bf16[50,72]"}},
                                json{{"lhs", "f32[60,20]"},
                                     {"rhs", "f32[2,20,30]"},
                                     {"group_offset", 1},
                                     {"group_sizes", {10, 20, 25, 5}},
                                     {"dout", "f32[60,30]"}},
                                json{{"lhs", "f32[9,8]"},
                                     {"rhs", "f32[2,8,8]"},
                                     {"group_sizes", {0, 0}},
                                     {"dout", "f32[9,8]"}}}) {
    const BoundArgs args = ragged_dot_vjp_op().bind(args_json);
    CAPTURE(args.key());
    try {
      check_args(onednn, args);
    } catch (const NotImplemented& e) {
      // bf16 needs avx512_core in oneDNN 2.x: a reason, never a silent skip.
      CHECK(std::string(e.what()).find("onednn") == 0);
      continue;
    }
    const TensorMap inputs = ragged_dot_vjp_op().make_inputs(args, 3);
    check_ragged_dot_vjp_outputs(args, inputs, run_ragged_dot_vjp(onednn, args, inputs, {}));
  }
  // Mixed dtypes are beyond the baseline.
  const BoundArgs mixed = ragged_dot_vjp_op().bind({{"lhs", "bf16[8,4]"},
                                                    {"rhs", "bf16[1,4,4]"},
                                                    {"preferred_element_type", "f32"},
                                                    {"group_sizes", {8}},
                                                    {"dout", "f32[8,4]"}});
  CHECK_THROWS_AS(check_args(onednn, mixed), NotImplemented);
}
