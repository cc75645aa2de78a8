// Tests of gated_delta_rule's cpu kernel: against the float64 oracle on every SIMD target (value
// widths that take the vector blocks and the scalar tail, mixed and decode-only batches, padded
// requests and tokens, f32 / bf16 / f16 with f32 or bf16 states), token by token and in chunks,
// one or all threads (a decode batch's tasks of one or several heads), and its conv state bit for
// bit against the reference's (a request without tokens keeps its old one).
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/gated_delta_rule/api.h"
#include "tests/ops/gated_delta_rule/test_util.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const GdnOp& op() { return gated_delta_rule_op(); }

std::vector<json> cpu_cases() {
  return {gdn_args({.lengths = {1, 6, 40},
                    .context = {2, 0, 3},
                    .n_kq = 1,
                    .n_v = 2,
                    .d_k = 20,
                    .d_v = 70,
                    .max_reqs = 5,
                    .pad_tokens = 2}),  // d_v 70: blocks and a tail
          gdn_args({.dtype = "bf16",
                    .state_dtype = "bf16",
                    .lengths = {1, 1, 1, 1},
                    .context = {9, 0, 4, 1},
                    .n_kq = 2,
                    .n_v = 4,
                    .d_k = 32,
                    .d_v = 32,
                    .max_reqs = 6}),  // decode only
          gdn_args({.dtype = "bf16",
                    .state_dtype = "bf16",
                    .lengths = {1, 1, 1, 1, 1, 1, 1, 1},
                    .context = {5, 2, 0, 7, 1, 3, 9, 4},
                    .n_kq = 2,
                    .n_v = 8,
                    .d_k = 16,
                    .d_v = 128}),  // decode only, several heads per task, whole rows of pairs
          gdn_args({.dtype = "f16",
                    .lengths = {3, 0, 25},
                    .context = {1, 2, 0},
                    .n_kq = 2,
                    .n_v = 2,
                    .d_k = 16,
                    .d_v = 48,
                    .W = 2,
                    .bias = false})};
}

}  // namespace

TEST_CASE("cpu gated_delta_rule passes the oracle on every target", "[gated_delta_rule]") {
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const json& c : cpu_cases()) {
      const BoundArgs args = op().bind(c);
      const TensorMap inputs = op().make_inputs(args, 4);
      // Token by token; chunks of 8 (several per request, a last one of one token); of 64.
      for (const int chunk : {0, 8, 64}) {
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

TEST_CASE("cpu gated_delta_rule writes the conv state the reference writes", "[gated_delta_rule]") {
  for (const json& c : cpu_cases()) {
    const BoundArgs args = op().bind(c);
    const TensorMap inputs = op().make_inputs(args, 2);
    TensorMap a = op().allocate_outputs(args), b = op().allocate_outputs(args);
    run_json(op().implementation("cpu"), args,
             heuristics_config_json(op().implementation("cpu"), args), inputs, a);
    run_json(op().implementation("reference"), args, json::object(), inputs, b);
    const Tensor& x = a.at("updated_conv_state");
    const Tensor& y = b.at("updated_conv_state");
    REQUIRE(x.size_bytes() == y.size_bytes());
    CHECK(std::memcmp(x.raw(), y.raw(), x.size_bytes()) == 0);
  }
}

TEST_CASE("cpu gated_delta_rule writes every output, padding tokens' zeros included",
          "[gated_delta_rule]") {
  // Padded requests and padding tokens, a decode prefix, chunked and token by token.
  const BoundArgs args = op().bind(cpu_cases()[0]);
  const TensorMap inputs = op().make_inputs(args, 3);
  for (const int chunk : {0, 8}) {
    CAPTURE(chunk);
    const json config{{"num_threads", 0}, {"chunk", chunk}};
    CHECK(outputs_not_written_whole(op(), op().implementation("cpu"), args, config, inputs) ==
          std::vector<std::string>{});
  }
}
