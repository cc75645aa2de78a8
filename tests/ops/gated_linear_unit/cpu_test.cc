// Tests for the "cpu" gated_linear_unit: configs against the float64 oracle, the error model's
// power to fail a wrong output, config validation, heuristics and the search space.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/tiles.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/gated_linear_unit/api.h"
#include "ops/gated_linear_unit/base.h"
#include "ops/gated_linear_unit/cpu_config.h"
#include "ops/gated_linear_unit/cpu_kernel.h"
#include "tests/ops/gated_linear_unit/glu_test_util.h"
#include "tests/ops/impl_calls.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using nlohmann::json;

namespace {

const Implementation& cpu_impl() { return gated_linear_unit_op().implementation("cpu"); }

// The heuristics' config for this CPU: its micro-tile is one the dispatched SIMD target has.
json heuristics(const json& args_json) {
  return heuristics_config_json(cpu_impl(), gated_linear_unit_op().bind(args_json),
                                cpu::host_device());
}

// `config` with this CPU's first micro-tile where it names none: the struct's default 14x32 is
// an AVX-512 shape, which the AVX2 target does not instantiate.
json with_target_micro_tile(json config) {
  const int lanes = cpu::simd_f32_lanes();
  const MicroKernelShape shape = micro_kernel_shapes(lanes)[0];
  config.emplace("mr", shape.mr);
  config.emplace("nr", shape.nr_vectors * lanes);
  return config;
}

// Runs the cpu implementation (output pre-filled with NaN so unwritten elements fail) and
// compares every output element with the float64 oracle under the op's error model.
Comparison run_and_compare(const json& args_json, const json& config, TensorMap* keep = nullptr) {
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  const BoundArgs args = op.bind(args_json);
  const TensorMap inputs = op.make_inputs(args, 7);
  TensorMap outputs = op.allocate_outputs(args);
  Tensor& out = outputs.at("out");
  for (int64_t i = 0; i < out.num_elements(); ++i) out.set(i, std::nan(""));
  check_args(cpu_impl(), args);
  check_config_json(cpu_impl(), args, config);
  run_json(cpu_impl(), args, config, inputs, outputs);
  const Comparison c = glu_testing::compare_all(args, inputs, out);
  if (keep != nullptr) {
    *keep = outputs;
    for (auto& [name, tensor] : inputs) keep->emplace(name, tensor);
  }
  return c;
}

std::vector<json> cases() {
  return {
      {{"x", "f32[2,24,40]"}, {"weights", "f32[40,2,48]"}, {"activation", "silu"}},
      {{"x", "bf16[37,64]"}, {"weights", "bf16[64,2,40]"}, {"activation", "gelu"}},
      {{"x", "f16[3,11,17]"}, {"weights", "f16[17,2,24]"}, {"activation", "sigmoid"}},
      {{"x", "f32[131,97]"}, {"weights", "f32[97,2,75]"}, {"activation", "gelu_tanh"}},
      {{"x", "bf16[4,33,48]"}, {"weights", "bf16[48,2,72]"}, {"activation", "relu"}},
      {{"x", "f32[40,1]"}, {"weights", "f32[1,2,33]"}, {"activation", "none"}},
      {{"x", "bf16[50,64]"}, {"weights", "bf16[64,2,3]"}, {"activation", "silu"}},
      {{"x", "bf16[20,16]"}, {"weights", "f32[16,2,24]"}, {"activation", "gelu"}},
      {{"x", "f32[7,0]"}, {"weights", "f32[0,2,5]"}, {"activation", "sigmoid"}},
  };
}

}  // namespace

TEST_CASE("cpu gated_linear_unit matches the oracle under its heuristics", "[glu]") {
  for (const json& args : cases()) {
    CAPTURE(args.dump());
    const Comparison c = run_and_compare(args, heuristics(args));
    CAPTURE(c.max_abs_error, c.bound, c.worst_ratio, c.worst_index);
    CHECK(c.violations == 0);
    CHECK(c.nonfinite == 0);
  }
}

TEST_CASE("cpu gated_linear_unit matches the oracle for split N, small tiles, threads", "[glu]") {
  const int lanes = cpu::simd_f32_lanes();
  const json args = {{"x", "bf16[3,29,53]"}, {"weights", "bf16[53,2,67]"}, {"activation", "silu"}};
  const json f32_args = {{"x", "f32[61,45]"}, {"weights", "f32[45,2,70]"}, {"activation", "gelu"}};
  const json unfused_args = {{"x", "f32[40,45]"},
                             {"gate_weights", "f32[45,70]"},
                             {"proj_weights", "f32[45,70]"},
                             {"activation", "sigmoid"}};
  std::vector<json> configs;
  for (int tile_n : {0, 16, 32, 48}) {
    for (int tile_m : {1, 13, 28, 200}) {
      json c = with_target_micro_tile(
          {{"tile_n", tile_n}, {"tile_m", tile_m}, {"tile_k", 16}, {"panel_n", 2 * lanes}});
      configs.push_back(c);
      c["num_threads"] = 1;
      configs.push_back(c);
    }
  }
  for (const json& config : configs) {
    CAPTURE(config.dump());
    for (const json& a : {args, f32_args, unfused_args}) {
      CAPTURE(a.dump());
      const Comparison c = run_and_compare(a, config);
      CAPTURE(c.max_abs_error, c.bound, c.worst_ratio, c.worst_index);
      CHECK(c.violations == 0);
      CHECK(c.nonfinite == 0);
    }
  }
}

TEST_CASE("cpu gated_linear_unit packs shared operands once, in waves of one tile at the least",
          "[glu]") {
  // Column tasks of a row tile share its packed x rows, row tasks of a column tile its packed
  // weights (tile_n = 0: all of [Wg | Wp] in one product). wave_bytes = 1 makes every tile a wave
  // of its own; the output starts as NaN, so a task that read another tile's packed operand or a
  // missed tile fails the oracle.
  const int lanes = cpu::simd_f32_lanes();
  for (const json& args_json :
       {json{{"x", "f32[61,45]"}, {"weights", "f32[45,2,70]"}, {"activation", "gelu"}},
        json{{"x", "bf16[3,29,53]"}, {"weights", "bf16[53,2,67]"}, {"activation", "silu"}},
        json{{"x", "f32[40,45]"},
             {"gate_weights", "f32[45,70]"},
             {"proj_weights", "f32[45,70]"},
             {"activation", "sigmoid"}}}) {
    const GatedLinearUnitOp& op = gated_linear_unit_op();
    const BoundArgs args = op.bind(args_json);
    const GluProblem p = GluProblem::from(args);
    const TensorMap inputs = op.make_inputs(args, 3);
    for (const std::pair<int64_t, int>& run :
         {std::pair{int64_t{1}, 16}, std::pair{kGemmTilesWaveBytes, 16}, std::pair{int64_t{1}, 0},
          std::pair{kGemmTilesWaveBytes, 0}}) {
      const int64_t wave_bytes = run.first;
      const int tile_n = run.second;
      CAPTURE(args_json.dump(), wave_bytes, tile_n);
      CpuGluConfig config;
      const MicroKernelShape shape = micro_kernel_shapes(lanes)[0];
      config.mr = shape.mr;
      config.nr = shape.nr_vectors * lanes;
      config.tile_m = 13;
      config.tile_n = tile_n;
      config.tile_k = 16;
      config.panel_n = 2 * lanes;
      config.num_threads = 2;
      TensorMap outputs = op.allocate_outputs(args);
      Tensor& out = outputs.at("out");
      for (int64_t i = 0; i < out.num_elements(); ++i) out.set(i, std::nan(""));
      gated_linear_unit_cpu_kernel(p, clamp_to_problem(config, p), inputs.at("x"),
                                   glu_weights(p, inputs), out, wave_bytes);
      const Comparison c = glu_testing::compare_all(args, inputs, out);
      CAPTURE(c.max_abs_error, c.bound, c.worst_ratio, c.worst_index);
      CHECK(c.violations == 0);
      CHECK(c.nonfinite == 0);
    }
  }
}

namespace {

// The bf16 engine `path` against the oracle: odd K (a padded pair), split N, small K blocks.
void check_bf16_path(const char* path) {
  for (const json& args :
       {json{{"x", "bf16[2,30,64]"}, {"weights", "bf16[64,2,40]"}, {"activation", "gelu"}},
        json{{"x", "bf16[9,7]"}, {"weights", "bf16[7,2,100]"}, {"activation", "sigmoid"}}}) {
    for (int tile_n : {0, 32}) {
      CAPTURE(path, args.dump(), tile_n);
      const Comparison c =
          run_and_compare(args, {{"bf16_path", path}, {"tile_n", tile_n}, {"tile_k", 32}});
      CAPTURE(c.max_abs_error, c.bound, c.worst_ratio);
      CHECK(c.violations == 0);
      CHECK(c.nonfinite == 0);
    }
  }
}

}  // namespace

TEST_CASE("cpu gated_linear_unit native bf16 path matches the oracle", "[glu]") {
  if (!gemm_has_native_bf16()) {
    WARN("skipping: this CPU has no avx512_bf16");
    return;
  }
  check_bf16_path("native_dot");
}

TEST_CASE("cpu gated_linear_unit AMX path matches the oracle (emulated tiles everywhere)",
          "[glu][amx]") {
  testing::for_each_tile_mode([](cpu::TileMode) { check_bf16_path("amx"); });
}

TEST_CASE("gated_linear_unit error model fails a perturbed output", "[glu]") {
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  for (const json& args_json :
       {json{{"x", "f32[16,64]"}, {"weights", "f32[64,2,32]"}, {"activation", "silu"}},
        json{{"x", "bf16[16,64]"}, {"weights", "bf16[64,2,32]"}, {"activation", "gelu"}}}) {
    CAPTURE(args_json.dump());
    TensorMap kept;
    REQUIRE(run_and_compare(args_json, heuristics(args_json), &kept).violations == 0);
    const BoundArgs args = op.bind(args_json);
    Tensor out = kept.at("out");
    Tensor perturbed(out.spec());
    for (int64_t i = 0; i < out.num_elements(); ++i) perturbed.set(i, out.get(i));
    // One element off by 2% (the size of dropping a few terms of the sum, or evaluating the
    // activation in bf16): the bound must catch it.
    const int64_t target = 37;
    perturbed.set(target, out.get(target) * 1.02 + 0.02);
    const Comparison c = glu_testing::compare_all(args, kept, perturbed);
    CHECK(c.violations == 1);
    CHECK(c.worst_index == target);
    CHECK(judge(c) == Disposition::kFailed);
  }
}

TEST_CASE("cpu gated_linear_unit rejects bad configs by field and f64 as NotImplemented", "[glu]") {
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  const BoundArgs args = op.bind({{"x", "f32[8,4]"}, {"weights", "f32[4,2,3]"}});
  auto field = [&](const json& config) -> std::string {
    try {
      check_config_json(cpu_impl(), args, with_target_micro_tile(config));
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return "<no error>";
  };
  CHECK(field(json::object()) == "<no error>");
  CHECK(field({{"tile_m", 0}}) == "tile_m");
  CHECK(field({{"tile_n", -1}}) == "tile_n");
  CHECK(field({{"tile_k", 0}}) == "tile_k");
  CHECK(field({{"mr", 5}, {"nr", 7}}) == "mr");
  CHECK(field({{"bf16_path", "fast"}}) == "bf16_path");
  CHECK(field({{"bf16_path", "native_dot"}}) == "bf16_path");  // f32 problem
  CHECK(field({{"num_threads", -1}}) == "num_threads");
  CHECK(field({{"unknown", 1}}) == "unknown");
  const BoundArgs f64 = op.bind({{"x", "f64[8,4]"}, {"weights", "f64[4,2,3]"}});
  CHECK_THROWS_AS(check_args(cpu_impl(), f64), NotImplemented);
}

TEST_CASE("cpu gated_linear_unit heuristics and search space are valid configs", "[glu]") {
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  const Device& device = cpu::host_device();
  for (const json& args_json :
       {json{{"x", "bf16[64,256,128]"}, {"weights", "bf16[128,2,256]"}, {"activation", "silu"}},
        json{{"x", "f32[2048,384]"}, {"weights", "f32[384,2,768]"}, {"activation", "silu"}},
        json{{"x", "f32[3,5]"}, {"weights", "f32[5,2,2]"}, {"activation", "relu"}}}) {
    CAPTURE(args_json.dump());
    const BoundArgs args = op.bind(args_json);
    const json heuristic = heuristics_config_json(cpu_impl(), args, device);
    CAPTURE(heuristic.dump());
    CHECK_NOTHROW(check_config_json(cpu_impl(), args, heuristic));
    const std::vector<json> space = autotuning_configs_json(cpu_impl(), args, device);
    CHECK(!space.empty());
    CHECK(space.front() == heuristic);
    for (const json& config : space) {
      CAPTURE(config.dump());
      CHECK_NOTHROW(check_config_json(cpu_impl(), args, config));
    }
  }
  // A wide N is split so that a task's f32 tiles stay cache-sized.
  const GluProblem wide =
      GluProblem::from(op.bind({{"x", "f32[4096,768]"}, {"weights", "f32[768,2,4096]"}}));
  const CpuGluConfig c = cpu_glu_heuristics_config(wide, device);
  if (const int64_t l2 = cpu::host_cpu().l2_bytes; l2 > 0) {
    CHECK(c.tile_n > 0);
    CHECK(int64_t{c.tile_m} * 2 * c.tile_n * 4 <= l2);
  }
}
