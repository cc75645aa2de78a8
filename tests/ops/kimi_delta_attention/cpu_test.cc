// Tests of kimi_delta_attention's cpu kernel: against the float64 oracle on every SIMD target,
// with value widths that take the vector blocks and the scalar tail, every gate form, segments
// with padding and shared slots, initial and final state, decode (one token per sequence), token
// by token and in chunks, and one or all threads.
#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/kimi_delta_attention/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/kimi_delta_attention/test_util.h"
#include "tests/ops/oracle_run.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const KdaOp& op() { return kimi_delta_attention_op(); }

}  // namespace

TEST_CASE("cpu kimi_delta_attention passes the oracle on every target", "[kda]") {
  std::vector<json> cases;
  json wide = kda_args("f32", 2, 2, 24, 20, 70);  // V = 70: whole blocks of 4 vectors and a tail
  wide["output_final_state"] = true;
  cases.push_back(wide);
  json gated = kda_args("bf16", 3, 1, 30, 32, 128);
  gated.update({{"a_log", "f32[3]"},
                {"delta_time_bias", "f32[96]"},
                {"use_gate_in_kernel", true},
                {"use_qk_l2norm", true},
                {"lower_bound", -4.0}});
  cases.push_back(gated);
  json segments = kda_args("f16", 2, 2, 60, 16, 40);
  segments.update({{"segment_ids", "i32[2,60]"},
                   {"initial_state", "f32[2,2,2,16,40]"},
                   {"output_final_state", true},
                   {"use_qk_l2norm", true}});
  cases.push_back(segments);
  json softplus = kda_args("f32", 1, 3, 40, 8, 9);
  softplus.update({{"a_log", "f32[1]"},
                   {"use_gate_in_kernel", true},
                   {"scale", 0.3},
                   {"segment_ids", "i32[3,40]"},
                   {"max_num_segments", 2}});
  cases.push_back(softplus);
  // Decode: one token per sequence from initial_state to final_state (its two passes read the
  // stored state twice, no f32 copy); bf16 states, and f32 with a tail of columns.
  for (const auto& [dtype, V] : {std::pair{"bf16", 32}, std::pair{"f32", 70}}) {
    json decode = kda_args("bf16", 2, 3, 1, 16, V);
    decode.update({{"initial_state", std::string(dtype) + "[3,1,2,16," + std::to_string(V) + "]"},
                   {"output_final_state", true},
                   {"use_qk_l2norm", true}});
    cases.push_back(decode);
  }
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const json& c : cases) {
      const BoundArgs args = op().bind(c);
      const TensorMap inputs = op().make_inputs(args, 4);
      // Token by token; chunks of 8 (sub-chunks of 8) and of 32 (two of 16).
      for (const int chunk : {0, 8, 32}) {
        for (const int threads : {1, 0}) {
          for (const TensorDecl& decl : op().outputs(args)) {
            CAPTURE(args.key(), chunk, threads, decl.name);
            const json config{{"num_threads", threads}, {"chunk", chunk}};
            CHECK(judge(run_against_oracle(op(), "cpu", args, config, inputs, args, decl.name)) ==
                  Disposition::kPassed);
          }
        }
      }
    }
  });
}

TEST_CASE("cpu kimi_delta_attention runs token by token the chunks it cannot factor", "[kda]") {
  // Chunks of 16 tokens: the first grows the state (g > 0 in one channel), the second decays
  // mildly (chunked), the third decays one channel by e^-8 per token (e^-128 over the
  // sub-chunk, past the factors' range). The oracle takes every gate.
  const BoundArgs args = op().bind(kda_args("f32", 1, 1, 48, 16, 24));
  TensorMap inputs = op().make_inputs(args, 7);
  Tensor gate(args.tensor("gate"));
  const Tensor& mild = inputs.at("gate");
  for (int64_t t = 0; t < 48; ++t) {
    for (int64_t i = 0; i < 16; ++i) {
      double g = mild.get(t * 16 + i);
      if (t < 16 && i == 0) g = 0.05;
      if (t >= 32 && i == 3) g = -8.0;
      gate.set(t * 16 + i, g);
    }
  }
  inputs.erase("gate");
  inputs.emplace("gate", std::move(gate));
  for (const int chunk : {0, 16}) {
    CAPTURE(chunk);
    const json config{{"num_threads", 1}, {"chunk", chunk}};
    CHECK(judge(run_against_oracle(op(), "cpu", args, config, inputs, args, "out")) ==
          Disposition::kPassed);
  }
}
