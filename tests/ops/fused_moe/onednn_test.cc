// Tests of fused_moe's oneDNN baseline (per-expert oneDNN matmuls around our router, epilogue and
// combine) against the float64 oracle, and its refusal of the dtypes it does not wire.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/fused_moe/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"

using namespace tokamax;
using nlohmann::json;

TEST_CASE("onednn fused_moe passes the oracle where oneDNN has the matmul", "[fused_moe]") {
  const Implementation& onednn = fused_moe_op().implementation("onednn");
  const std::vector<json> cases = {
      {{"x", "bf16[40,64]"},
       {"w1", "bf16[4,64,48]"},
       {"w2", "bf16[4,24,64]"},
       {"gating", "f32[40,4]"},
       {"topk", 2},
       {"w2_bias", "f32[4,1,64]"}},
      {{"x", "f32[33,20]"},
       {"w1", "f32[5,20,18]"},
       {"w2", "f32[5,9,20]"},
       {"gating", "bf16[33,5]"},
       {"topk", 3},
       {"act_fn", "swigluoai"},
       {"w1_bias", "f32[5,1,18]"}},
  };
  for (const json& c : cases) {
    const BoundArgs args = fused_moe_op().bind(c);
    CAPTURE(args.key());
    try {
      check_args(onednn, args);
    } catch (const NotImplemented& e) {
      WARN("skipping: " << e.what());
      continue;
    }
    const TensorMap inputs = fused_moe_op().make_inputs(args, 4);
    const Comparison result =
        run_against_oracle(fused_moe_op(), "onednn", args, json::object(), inputs, args, "out");
    CHECK(judge(result) == Disposition::kPassed);
  }
  const BoundArgs f16 = fused_moe_op().bind(
      {{"x", "f16[4,8]"}, {"w1", "f16[2,8,8]"}, {"w2", "f16[2,4,8]"}, {"gating", "f32[4,2]"}});
  CHECK_THROWS_AS(check_args(onednn, f16), NotImplemented);
}
