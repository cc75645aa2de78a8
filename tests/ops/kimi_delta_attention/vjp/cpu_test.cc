// Tests of kimi_delta_attention_vjp's cpu kernel: every gradient against the float64 oracle on
// every SIMD target, for every gate form, segments with shared slots and padding, initial state
// and dfinal_state, value widths that take the vector loops and a tail, token by token with
// checkpoint blocks of 1, 5 and 16 tokens and in chunks of 5 and 32, one or all threads; and
// every output element written (padding tokens' zeros too) over outputs that held other bytes.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/kimi_delta_attention/vjp/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/kimi_delta_attention/test_util.h"
#include "tests/ops/oracle_run.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const KdaVjpOp& op() { return kimi_delta_attention_vjp_op(); }

}  // namespace

TEST_CASE("cpu kimi_delta_attention_vjp passes the oracle on every target", "[kda_vjp]") {
  std::vector<json> cases;
  json wide = kda_args("f32", 2, 2, 24, 20, 70);  // V = 70: whole vectors and a tail
  wide.update({{"dout", "f32[2,2,24,70]"},
               {"output_final_state", true},
               {"dfinal_state", "f32[2,1,2,20,70]"},
               {"initial_state", "f32[2,1,2,20,70]"}});
  cases.push_back(wide);
  json gated = kda_args("bf16", 3, 1, 30, 32, 32);
  gated.update({{"dout", "bf16[3,1,30,32]"},
                {"a_log", "f32[3]"},
                {"delta_time_bias", "f32[96]"},
                {"use_gate_in_kernel", true},
                {"use_qk_l2norm", true},
                {"lower_bound", -4.0}});
  cases.push_back(gated);
  json segments = kda_args("f16", 2, 2, 60, 16, 40);
  segments.update({{"dout", "f16[2,2,60,40]"},
                   {"segment_ids", "i32[2,60]"},
                   {"initial_state", "f32[2,2,2,16,40]"},
                   {"use_qk_l2norm", true}});
  cases.push_back(segments);
  json softplus = kda_args("f32", 1, 3, 40, 8, 9);
  softplus.update({{"dout", "f32[1,3,40,9]"},
                   {"a_log", "f32[1]"},
                   {"use_gate_in_kernel", true},
                   {"scale", 0.3},
                   {"segment_ids", "i32[3,40]"},
                   {"max_num_segments", 2}});
  cases.push_back(softplus);
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const json& c : cases) {
      const BoundArgs args = op().bind(c);
      const TensorMap inputs = op().make_inputs(args, 4);
      // Token by token (blocks of 1, 5, 16) and in chunks (blocks of 5 and 32: a sub-chunk and
      // two; blocks that mix slots or padding go token by token).
      for (const bool chunked : {false, true}) {
        for (const int block : chunked ? std::vector<int>{5, 32} : std::vector<int>{1, 5, 16}) {
          for (const int threads : {1, 0}) {
            for (const TensorDecl& decl : op().outputs(args)) {
              CAPTURE(args.key(), chunked, block, threads, decl.name);
              const json config{{"num_threads", threads}, {"block", block}, {"chunked", chunked}};
              CHECK(judge(run_against_oracle(op(), "cpu", args, config, inputs, args, decl.name)) ==
                    Disposition::kPassed);
            }
          }
        }
      }
    }
  });
}

TEST_CASE("cpu kimi_delta_attention_vjp writes every gradient, padding tokens' zeros included",
          "[kda_vjp]") {
  json segments = kda_args("bf16", 2, 2, 60, 16, 32);
  segments.update({{"dout", "bf16[2,2,60,32]"},
                   {"segment_ids", "i32[2,60]"},
                   {"initial_state", "f32[2,2,2,16,32]"},
                   {"use_qk_l2norm", true}});
  const BoundArgs args = op().bind(segments);
  const TensorMap inputs = op().make_inputs(args, 3);
  const Tensor& ids = inputs.at("segment_ids");
  int64_t padding = 0;
  for (int64_t e = 0; e < ids.num_elements(); ++e) padding += ids.get(e) == 0;
  REQUIRE(padding > 0);
  for (const bool chunked : {false, true}) {
    CAPTURE(chunked);
    const json config{{"num_threads", 0}, {"block", 16}, {"chunked", chunked}};
    CHECK(outputs_not_written_whole(op(), op().implementation("cpu"), args, config, inputs) ==
          std::vector<std::string>{});
  }
}
