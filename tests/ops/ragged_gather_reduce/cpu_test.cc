// Tests of the cpu ragged_gather_reduce implementation: every dtype, store kind, prefetch
// distance and task split on every SIMD target against the reference (within the op's bound: the
// kernel fuses each multiply into its add) and the float64 oracle; and its configs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ops/ragged_gather_reduce/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const Implementation& cpu_impl() { return ragged_gather_reduce_op().implementation("cpu"); }

json config(bool stream, int prefetch, int rows_per_task = 3, int threads = 0) {
  return {{"stream_stores", stream},
          {"prefetch_rows", prefetch},
          {"rows_per_task", rows_per_task},
          {"num_threads", threads}};
}

json args_of(const std::string& x, const std::string& weights, int64_t routes, int64_t g) {
  const std::string n = "[" + std::to_string(routes) + "]";
  return {{"x", x},
          {"indices", "i32" + n},
          {"topk_weights", weights + n},
          {"valid_rows_mask", "bool" + n},
          {"reduce_group_size", g}};
}

}  // namespace

TEST_CASE("cpu ragged_gather_reduce passes the oracle for every config on every SIMD target",
          "[ragged_gather_reduce]") {
  const std::vector<json> cases = {
      // bf16 rows of whole pairs (the pair path, streamed where asked), f32 and f16 rows with
      // vector and partial tails, one route per token (tokens without a valid one: zeros).
      args_of("bf16[96,512]", "bf16", 256, 8), args_of("bf16[50,200]", "f32", 60, 4),
      args_of("f32[40,100]", "f32", 90, 3),    args_of("f16[33,37]", "f16", 64, 2),
      args_of("f32[20,16]", "bf16", 48, 1),    args_of("bf16[10,7]", "f16", 12, 12),
  };
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const json& c : cases) {
      const BoundArgs args = ragged_gather_reduce_op().bind(c);
      const TensorMap inputs = ragged_gather_reduce_op().make_inputs(args, 11);
      std::vector<json> configs = {config(true, 2, 1, 1), heuristics_config_json(cpu_impl(), args)};
      for (const bool stream : {false, true}) {
        for (const int prefetch : {0, 1, 5}) configs.push_back(config(stream, prefetch));
      }
      for (const json& cfg : configs) {
        CAPTURE(args.key(), cfg.dump());
        const Comparison result =
            run_against_oracle(ragged_gather_reduce_op(), "cpu", args, cfg, inputs, args, "out");
        CHECK(judge(result) == Disposition::kPassed);
      }
    }
  });
}

TEST_CASE("ragged_gather_reduce's f16 sums below f16's normal range pass at every seed",
          "[ragged_gather_reduce]") {
  // Small sums round to f16's subnormal spacing (2^-24), far more than u |sum|: the bound's
  // absolute floor must cover that, for the kernel and the reference alike.
  const BoundArgs args = ragged_gather_reduce_op().bind(args_of("f16[64,96]", "f32", 200, 1));
  for (uint64_t seed = 0; seed < 12; ++seed) {
    CAPTURE(seed);
    const TensorMap inputs = ragged_gather_reduce_op().make_inputs(args, seed);
    for (const char* impl : {"cpu", "reference"}) {
      CAPTURE(impl);
      const json chosen = std::string(impl) == "cpu" ? config(false, 0) : json::object();
      const Comparison result =
          run_against_oracle(ragged_gather_reduce_op(), impl, args, chosen, inputs, args, "out");
      CHECK(judge(result) == Disposition::kPassed);
    }
  }
}

TEST_CASE("cpu ragged_gather_reduce configs: streamed stores for outputs past a core's L2",
          "[ragged_gather_reduce]") {
  const BoundArgs decode = ragged_gather_reduce_op().bind(args_of("bf16[64,2880]", "f32", 8, 4));
  const BoundArgs prefill =
      ragged_gather_reduce_op().bind(args_of("bf16[16384,7168]", "f32", 16384, 8));
  CHECK(heuristics_config_json(cpu_impl(), decode)["stream_stores"] == false);
  CHECK(heuristics_config_json(cpu_impl(), prefill)["stream_stores"] == true);
  const std::vector<json> space = autotuning_configs_json(cpu_impl(), decode);
  CHECK(space.front() == heuristics_config_json(cpu_impl(), decode));
  CHECK(std::any_of(space.begin(), space.end(), [](const json& c) { return c["stream_stores"]; }));
}
