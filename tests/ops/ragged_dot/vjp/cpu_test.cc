// Tests for the cpu ragged_dot_vjp implementation against the oracle, and its configs.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/framework/errors.h"
#include "ops/ragged_dot/vjp/api.h"
#include "ops/ragged_dot/vjp/cpu_config.h"
#include "ops/ragged_dot/vjp/cpu_kernel.h"
#include "tests/ops/ragged_dot/vjp/test_util.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const Implementation& cpu_impl() { return ragged_dot_vjp_op().implementation("cpu"); }

// Empty groups, one long group, odd sizes, rows past the sum, a shard, K = 1 and N = 1, 16-bit
// inputs with 16-bit and f32 cotangents.
std::vector<json> test_cases() {
  return {
      {{"lhs", "f32[64,32]"},
       {"rhs", "f32[4,32,48]"},
       {"group_sizes", {0, 7, 13, 33}},
       {"dout", "f32[64,48]"}},
      {{"lhs", "f32[130,70]"},
       {"rhs", "f32[3,70,45]"},
       {"group_sizes", {33, 64, 13}},
       {"dout", "f32[130,45]"}},
      {{"lhs", "f32[20,1]"},
       {"rhs", "f32[3,1,16]"},
       {"group_sizes", {7, 0, 13}},
       {"dout", "f32[20,16]"}},
      {{"lhs", "bf16[50,40]"},
       {"rhs", "bf16[3,40,72]"},
       {"group_sizes", {33, 0, 7}},
       {"dout", "bf16[50,72]"}},
      {{"lhs", "bf16[51,41]"},
       {"rhs", "bf16[2,41,1]"},
       {"group_sizes", {13, 38}},
       {"dout", "bf16[51,1]"}},
      {{"lhs", "bf16[40,24]"},
       {"rhs", "bf16[2,24,40]"},
       {"group_sizes", {33, 7}},
       {"preferred_element_type", "f32"},
       {"dout", "f32[40,40]"}},
      {{"lhs", "f16[45,24]"},
       {"rhs", "f16[2,24,40]"},
       {"group_sizes", {33, 7}},
       {"dout", "f16[45,40]"}},
      {{"lhs", "f32[60,20]"},
       {"rhs", "f32[2,20,30]"},
       {"group_offset", 1},
       {"group_sizes", {10, 20, 25, 5}},
       {"dout", "f32[60,30]"}},
  };
}

// Tiny and odd tiles for every micro-kernel shape: partial micro-tiles, several K blocks and
// panels per task, many tasks per group.
std::vector<json> path_configs(bool native) {
  const int lanes = cpu::simd_f32_lanes();
  std::vector<json> configs;
  for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
    const int nr = shape.nr_vectors * lanes;
    const json base = {
        {"mr", shape.mr}, {"nr", nr}, {"bf16_path", native ? "native_dot" : "convert_f32"}};
    json tiny = base;
    tiny.update({{"tile_m", 1}, {"tile_n", 1}, {"tile_k", 1}, {"panel_n", nr}, {"num_threads", 1}});
    json odd = base;
    odd.update({{"tile_m", 2 * shape.mr + 1},
                {"tile_n", nr + 3},
                {"tile_k", 7},
                {"panel_n", nr},
                {"num_threads", 2}});
    configs.push_back(tiny);
    configs.push_back(odd);
  }
  return configs;
}

}  // namespace

TEST_CASE("cpu ragged_dot_vjp passes the oracle across shapes, dtypes and configs",
          "[ragged_dot_vjp]") {
  for (const json& args_json : test_cases()) {
    const BoundArgs args = ragged_dot_vjp_op().bind(args_json);
    const TensorMap inputs = ragged_dot_vjp_op().make_inputs(args, 9);
    std::vector<json> configs = {json()};  // the heuristics
    for (const json& c : path_configs(false)) configs.push_back(c);
    const RaggedDotVjpProblem p = RaggedDotVjpProblem::from(args);
    if (is_bf16_vjp_problem(p) && gemm_has_native_bf16()) {
      for (const json& c : path_configs(true)) configs.push_back(c);
    }
    if (is_bf16_vjp_problem(p)) {  // the AMX tiles, emulated where the CPU has none
      testing::ScopedTileMode emulated(cpu::TileMode::kEmulated);
      for (json c : path_configs(true)) {
        c["bf16_path"] = "amx";
        CAPTURE(args.key(), c.dump());
        check_ragged_dot_vjp_outputs(args, inputs, run_ragged_dot_vjp(cpu_impl(), args, inputs, c));
      }
    }
    for (const json& c : autotuning_configs_json(cpu_impl(), args)) configs.push_back(c);
    for (const json& config : configs) {
      CAPTURE(args.key(), config.dump());
      check_ragged_dot_vjp_outputs(args, inputs,
                                   run_ragged_dot_vjp(cpu_impl(), args, inputs, config));
    }
  }
}

TEST_CASE("cpu ragged_dot_vjp packs its B slabs in waves, one slab per wave at the least",
          "[ragged_dot_vjp]") {
  // wave_bytes = 1: every (gradient, group, column block) slab is a wave of its own; each output
  // element starts as NaN, so one a wave misses fails.
  for (const json& args_json : test_cases()) {
    const BoundArgs args = ragged_dot_vjp_op().bind(args_json);
    const TensorMap inputs = ragged_dot_vjp_op().make_inputs(args, 4);
    const RaggedDotVjpProblem p = RaggedDotVjpProblem::from(args);
    CpuRaggedDotVjpConfig config = cpu_ragged_dot_vjp_heuristics_config(p, cpu::host_device());
    config.tile_m = 2 * config.mr + 1;
    config.tile_n = 5;
    config.num_threads = 2;
    TensorMap outputs = ragged_dot_vjp_op().allocate_outputs(args);
    for (auto& [name, tensor] : outputs) {
      for (int64_t i = 0; i < tensor.num_elements(); ++i) tensor.set(i, std::nan(""));
    }
    CAPTURE(args.key());
    ragged_dot_vjp_cpu_kernel(p, config, inputs.at("lhs"), inputs.at("rhs"), inputs.at("dout"),
                              outputs.at("dlhs"), outputs.at("drhs"), /*wave_bytes=*/1);
    check_ragged_dot_vjp_outputs(args, inputs, outputs);
  }
}

TEST_CASE("cpu ragged_dot_vjp declines f64 and refuses configs that cannot run",
          "[ragged_dot_vjp]") {
  const BoundArgs f64 = ragged_dot_vjp_op().bind(
      {{"lhs", "f64[8,4]"}, {"rhs", "f64[1,4,4]"}, {"group_sizes", {8}}, {"dout", "f64[8,4]"}});
  CHECK_THROWS_AS(check_args(cpu_impl(), f64), NotImplemented);
  const BoundArgs f32 = ragged_dot_vjp_op().bind(
      {{"lhs", "f32[8,4]"}, {"rhs", "f32[1,4,4]"}, {"group_sizes", {8}}, {"dout", "f32[8,4]"}});
  json native = heuristics_config_json(cpu_impl(), f32);
  native["bf16_path"] = "native_dot";
  try {
    check_config_json(cpu_impl(), f32, native);
    FAIL("native_dot accepted for f32 operands");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "bf16_path");
  }
  json threads = heuristics_config_json(cpu_impl(), f32);
  threads["num_threads"] = 100000;
  CHECK_THROWS_AS(check_config_json(cpu_impl(), f32, threads), InvalidArgument);
  json unknown = heuristics_config_json(cpu_impl(), f32);
  unknown["tile_q"] = 1;
  CHECK_THROWS_AS(check_config_json(cpu_impl(), f32, unknown), InvalidArgument);
}

TEST_CASE("cpu ragged_dot_vjp heuristics split a large problem for the cores", "[ragged_dot_vjp]") {
  const BoundArgs args = ragged_dot_vjp_op().bind({{"lhs", "f32[2048,2048]"},
                                                   {"rhs", "f32[8,2048,2048]"},
                                                   {"group_sizes", {2048, 0, 0, 0, 0, 0, 0, 0}},
                                                   {"dout", "f32[2048,2048]"}});
  const json c = heuristics_config_json(cpu_impl(), args);
  CAPTURE(c.dump());
  CHECK(c.at("num_threads") == 0);
  CHECK(c.at("tile_m").get<int>() >= 128);
  CHECK(c.at("tile_n").get<int>() >= c.at("nr").get<int>());
}
