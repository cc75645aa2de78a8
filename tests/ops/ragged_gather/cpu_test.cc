// Tests of the cpu ragged_gather implementation: every store kind, prefetch distance and task
// split on every SIMD target, against the reference byte for byte, rows outside [start, end)
// untouched; and its configs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "ops/ragged_gather/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const Implementation& cpu_impl() { return ragged_gather_op().implementation("cpu"); }

json config(bool stream, int prefetch, int rows_per_task = 3, int threads = 0) {
  return {{"stream_stores", stream},
          {"prefetch_rows", prefetch},
          {"rows_per_task", rows_per_task},
          {"num_threads", threads}};
}

// cpu with `config` writes the reference's rows [start, end) byte for byte and leaves the other
// rows as they were (a fill byte no copy writes there).
void check_cpu(const BoundArgs& args, const TensorMap& inputs, const json& c) {
  CAPTURE(args.key(), c.dump());
  const RaggedGatherProblem p = RaggedGatherProblem::from(args);
  TensorMap outputs = ragged_gather_op().allocate_outputs(args);
  TensorMap reference = ragged_gather_op().allocate_outputs(args);
  Tensor& out = outputs.at("out");
  std::memset(out.raw(), 0xA5, out.size_bytes());
  std::memset(reference.at("out").raw(), 0xA5, out.size_bytes());
  check_config_json(cpu_impl(), args, c);
  run_json(cpu_impl(), args, c, inputs, outputs);
  run_json(ragged_gather_op().implementation("reference"), args, json::object(), inputs, reference);
  CHECK(std::memcmp(out.raw(), reference.at("out").raw(), out.size_bytes()) == 0);
  const auto* bytes = static_cast<const unsigned char*>(out.raw());
  const int64_t before = p.start * p.row_bytes(), after = p.end * p.row_bytes();
  CHECK(std::all_of(bytes, bytes + before, [](unsigned char b) { return b == 0xA5; }));
  CHECK(std::all_of(bytes + after, bytes + out.size_bytes(),
                    [](unsigned char b) { return b == 0xA5; }));
}

}  // namespace

TEST_CASE("cpu ragged_gather equals the reference for every store kind on every SIMD target",
          "[ragged_gather]") {
  const std::vector<json> cases = {
      // Rows of whole lines (streamed where asked), partial ones, odd byte counts.
      {{"x", "bf16[64,256]"}, {"indices", "i32[300]"}, {"start", 0}, {"end", 300}},
      {{"x", "f32[37,100]"}, {"indices", "i32[90]"}, {"start", 13}, {"end", 77}},
      {{"x", "i8[20,131]"}, {"indices", "i32[40]"}, {"start", 1}, {"end", 39}},
      {{"x", "f16[9,3]"}, {"indices", "i32[25]"}, {"start", 4}, {"end", 25}},
      {{"x", "f64[5,8]"}, {"indices", "i32[7]"}, {"start", 6}, {"end", 7}},
      {{"x", "bf16[4,64]"}, {"indices", "i32[10]"}, {"start", 5}, {"end", 5}},
  };
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const json& c : cases) {
      const BoundArgs args = ragged_gather_op().bind(c);
      const TensorMap inputs = ragged_gather_op().make_inputs(args, 7);
      for (const bool stream : {false, true}) {
        for (const int prefetch : {0, 1, 5}) check_cpu(args, inputs, config(stream, prefetch));
      }
      check_cpu(args, inputs, config(true, 2, 1, 1));
      check_cpu(args, inputs, heuristics_config_json(cpu_impl(), args));
    }
  });
}

TEST_CASE("cpu ragged_gather configs: streamed stores for outputs past a core's L2",
          "[ragged_gather]") {
  const BoundArgs small = ragged_gather_op().bind(
      {{"x", "bf16[64,2880]"}, {"indices", "i32[4]"}, {"start", 0}, {"end", 4}});
  const BoundArgs large = ragged_gather_op().bind(
      {{"x", "bf16[2048,7168]"}, {"indices", "i32[16384]"}, {"start", 0}, {"end", 16384}});
  CHECK(heuristics_config_json(cpu_impl(), small)["stream_stores"] == false);
  CHECK(heuristics_config_json(cpu_impl(), large)["stream_stores"] == true);
  const std::vector<json> space = autotuning_configs_json(cpu_impl(), small);
  CHECK(std::any_of(space.begin(), space.end(), [](const json& c) { return c["stream_stores"]; }));
  CHECK(std::any_of(space.begin(), space.end(),
                    [](const json& c) { return c["prefetch_rows"] == 0; }));
  CHECK_THROWS_AS(check_config_json(cpu_impl(), small, config(false, -1)), InvalidArgument);
  CHECK_THROWS_AS(check_config_json(cpu_impl(), small, config(false, 65)), InvalidArgument);
  CHECK_THROWS_AS(check_config_json(cpu_impl(), small, config(false, 2, 0)), InvalidArgument);
  CHECK_THROWS_AS(check_config_json(cpu_impl(), small, config(false, 2, 1, 100000)),
                  InvalidArgument);
}
