// Tests for the cpu and oneDNN gated_linear_unit_vjp implementations against the oracle, and the
// cpu configs.
#include <catch2/catch.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/framework/errors.h"
#include "ops/gated_linear_unit/vjp/api.h"
#include "ops/gated_linear_unit/vjp/base.h"
#include "ops/gated_linear_unit/vjp/cpu_config.h"
#include "tests/ops/gated_linear_unit/vjp/test_util.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

std::vector<json> test_cases() {
  return {
      {{"x", "f32[70,33]"},
       {"weights", "f32[33,2,45]"},
       {"activation", "silu"},
       {"dout", "f32[70,45]"}},
      {{"x", "f32[3,7,20]"},
       {"weights", "f32[20,2,17]"},
       {"activation", "relu"},
       {"dout", "f32[3,7,17]"}},
      {{"x", "bf16[50,40]"},
       {"weights", "bf16[40,2,72]"},
       {"activation", "gelu"},
       {"dout", "bf16[50,72]"}},
      {{"x", "f16[45,24]"},
       {"weights", "f16[24,2,40]"},
       {"activation", "sigmoid"},
       {"dout", "f16[45,40]"}},
      {{"x", "f32[31,16]"},
       {"gate_weights", "f32[16,19]"},
       {"proj_weights", "f32[16,19]"},
       {"activation", "gelu_tanh"},
       {"dout", "f32[31,19]"}},
      {{"x", "bf16[20,1]"}, {"weights", "bf16[1,2,9]"}, {"dout", "bf16[20,9]"}},
  };
}

}  // namespace

TEST_CASE("cpu gated_linear_unit_vjp passes the oracle across shapes, dtypes and configs",
          "[glu_vjp]") {
  const Implementation& cpu = gated_linear_unit_vjp_op().implementation("cpu");
  const int lanes = cpu::simd_f32_lanes();
  for (const json& args_json : test_cases()) {
    const BoundArgs args = gated_linear_unit_vjp_op().bind(args_json);
    const TensorMap inputs = gated_linear_unit_vjp_op().make_inputs(args, 9);
    std::vector<json> configs = {json()};
    for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
      const int nr = shape.nr_vectors * lanes;
      configs.push_back({{"mr", shape.mr},
                         {"nr", nr},
                         {"tile_m", 1},
                         {"tile_n", 1},
                         {"tile_k", 3},
                         {"panel_n", nr},
                         {"num_threads", 1}});
      configs.push_back({{"mr", shape.mr},
                         {"nr", nr},
                         {"tile_m", 2 * shape.mr + 1},
                         {"tile_n", nr + 5},
                         {"tile_k", 7},
                         {"panel_n", nr},
                         {"num_threads", 2}});
    }
    for (const json& c : autotuning_configs_json(cpu, args)) configs.push_back(c);
    for (const json& config : configs) {
      CAPTURE(config.dump());
      check_glu_vjp_outputs(args, inputs, run_glu_vjp(cpu, args, inputs, config));
    }
  }
  const BoundArgs f64 = gated_linear_unit_vjp_op().bind(
      {{"x", "f64[4,3]"}, {"weights", "f64[3,2,2]"}, {"dout", "f64[4,2]"}});
  CHECK_THROWS_AS(check_args(cpu, f64), NotImplemented);
}

TEST_CASE("onednn gated_linear_unit_vjp passes the oracle on f32 and declines 16-bit",
          "[glu_vjp]") {
  const Implementation& onednn = gated_linear_unit_vjp_op().implementation("onednn");
  for (const json& args_json : test_cases()) {
    const BoundArgs args = gated_linear_unit_vjp_op().bind(args_json);
    CAPTURE(args.key());
    if (args.tensor("x").dtype != DType::kF32) {
      CHECK_THROWS_AS(check_args(onednn, args), NotImplemented);
      continue;
    }
    const TensorMap inputs = gated_linear_unit_vjp_op().make_inputs(args, 9);
    check_glu_vjp_outputs(args, inputs, run_glu_vjp(onednn, args, inputs, {}));
  }
}

TEST_CASE("cpu gated_linear_unit_vjp heuristics leave no thin column tile and one short K block",
          "[glu_vjp]") {
  cpu::CpuInfo info = cpu::host_cpu();
  info.cores = 2;
  info.l1d_bytes = 32 << 10;
  info.l2_bytes = 1 << 20;
  info.isa = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl"};
  const cpu::CpuDevice device{info, false};
  auto config = [&](int64_t M, int64_t K, int64_t N) {
    const std::string m = std::to_string(M), k = std::to_string(K), n = std::to_string(N);
    const GluVjpProblem p = GluVjpProblem::from(
        gated_linear_unit_vjp_op().bind({{"x", "f32[" + m + "," + k + "]"},
                                         {"weights", "f32[" + k + ",2," + n + "]"},
                                         {"dout", "f32[" + m + "," + n + "]"}}));
    return cpu_glu_vjp_heuristics_config(p, device);
  };
  // Llama MLP: 2816 in tiles of 896 (two panels of 448) would end on 128: four panels instead
  // (1792 + 1024), and K = 1024 then fits one tile, with a task per core in every phase.
  const CpuGluVjpConfig llama = config(512, 1024, 2816);
  CAPTURE(llama.tile_n, llama.panel_n, llama.tile_m);
  CHECK(llama.tile_n == 4 * llama.panel_n);
  CHECK(llama.tile_m == 504);
  // Last tiles of at least half a tile keep the two-panel tile: 1536 = 896 + 640, and 768 fits.
  CHECK(config(2048, 384, 1536).tile_n == 2 * llama.panel_n);
  CHECK(config(2048, 384, 768).tile_n == 2 * llama.panel_n);
  // The shortest contraction as one K block when it is at most twice the L1 block (288 here):
  // the dW phase's M = 512 on the llama MLP, the H phase's K = 384 on AF3; a long one keeps 288
  // (and the panels stay sized by 288 either way).
  CHECK(llama.tile_k == 512);
  CHECK(config(2048, 384, 768).tile_k == 384);
  CHECK(config(4096, 4096, 4096).tile_k == 288);
  CHECK(config(4096, 4096, 4096).panel_n == llama.panel_n);
  for (const auto& [M, K, N] : {std::tuple{512, 1024, 2816}, std::tuple{2048, 384, 1536},
                                std::tuple{300, 5000, 4500}, std::tuple{64, 96, 7000}}) {
    const CpuGluVjpConfig c = config(M, K, N);
    CAPTURE(M, K, N, c.tile_n);
    for (const int64_t extent : {N, K}) {
      if (extent > c.tile_n && extent % c.tile_n != 0) CHECK(extent % c.tile_n >= c.tile_n / 2);
    }
  }
}

TEST_CASE("cpu gated_linear_unit_vjp heuristics cut the rows in a multiple of the cores",
          "[glu_vjp]") {
  // The dx phase runs one task per row tile when K fits one column tile: 5 tiles on 2 cores would
  // take 3 rounds. A row count that already divides among the cores keeps its tiles (tile_m also
  // caps the dW phase's K tiles).
  for (const int cores : {2, 3, 4}) {
    cpu::CpuInfo info = cpu::host_cpu();
    info.cores = cores;
    const cpu::CpuDevice device{info, false};
    for (const json& args_json :
         {json{{"x", "f32[2048,384]"},
               {"weights", "f32[384,2,768]"},
               {"activation", "silu"},
               {"dout", "f32[2048,768]"}},
          json{{"x", "f32[4000,256]"}, {"weights", "f32[256,2,512]"}, {"dout", "f32[4000,512]"}}}) {
      const GluVjpProblem p = GluVjpProblem::from(gated_linear_unit_vjp_op().bind(args_json));
      const CpuGluVjpConfig c = cpu_glu_vjp_heuristics_config(p, device);
      CAPTURE(cores, args_json.dump(), c.tile_m);
      const int64_t tiles = (p.fwd.M + c.tile_m - 1) / c.tile_m;
      CHECK(tiles % cores == 0);
      CHECK(c.tile_m % c.mr == 0);
      CHECK(tiles * c.tile_m - p.fwd.M < c.tile_m);  // no empty tile
    }
  }
}

TEST_CASE("cpu gated_linear_unit_vjp runs its bf16 products on vdpbf16ps where the CPU can",
          "[glu_vjp]") {
  const Implementation& cpu = gated_linear_unit_vjp_op().implementation("cpu");
  const json bf16_args = {{"x", "bf16[37,50]"},
                          {"weights", "bf16[50,2,41]"},
                          {"activation", "gelu"},
                          {"dout", "bf16[37,41]"}};
  const json f32_args = {{"x", "f32[37,50]"}, {"weights", "f32[50,2,41]"}, {"dout", "f32[37,41]"}};
  auto rejected_field = [&](const json& args_json, const json& config) -> std::string {
    try {
      check_config_json(cpu, gated_linear_unit_vjp_op().bind(args_json),
                        cpu.canonical_config(config));
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return "<no error>";
  };
  CHECK(rejected_field(bf16_args, {{"bf16_path", "fast"}}) == "bf16_path");
  CHECK(rejected_field(f32_args, {{"bf16_path", "native_dot"}}) == "bf16_path");
  CHECK(rejected_field(f32_args, {{"bf16_path", "convert_f32"}}) == "<no error>");
  const BoundArgs f32 = gated_linear_unit_vjp_op().bind(f32_args);
  CHECK(heuristics_config_json(cpu, f32).at("bf16_path") == "convert_f32");
  const BoundArgs bf16 = gated_linear_unit_vjp_op().bind(bf16_args);
  if (!gemm_has_native_bf16()) {
    CHECK(heuristics_config_json(cpu, bf16).at("bf16_path") == "convert_f32");
    CHECK(rejected_field(bf16_args, {{"bf16_path", "native_dot"}}) == "bf16_path");
    WARN("skipping the native path: this CPU has no avx512_bf16");
    return;
  }
  // The fastest engine here: vdpbf16ps on AMD, f32 FMAs on Intel without AMX (checks.h).
  CHECK(heuristics_config_json(cpu, bf16).at("bf16_path") == fastest_bf16_path(cpu::host_cpu()));
  // Both paths in the search space, so that tune can compare them.
  int native = 0, convert = 0;
  for (const json& c : autotuning_configs_json(cpu, bf16)) {
    (c.at("bf16_path") == "native_dot" ? native : convert) += 1;
  }
  CHECK(native > 0);
  CHECK(convert > 0);
  // Odd depths (a last half pair), tiles smaller than the problem, one and two threads.
  const TensorMap inputs = gated_linear_unit_vjp_op().make_inputs(bf16, 5);
  for (const json& config :
       {json{{"bf16_path", "native_dot"}},
        json{{"bf16_path", "native_dot"},
             {"tile_m", 14},
             {"tile_n", 32},
             {"tile_k", 7},
             {"panel_n", 32},
             {"num_threads", 2}},
        json{{"bf16_path", "native_dot"}, {"tile_k", 33}, {"num_threads", 1}}}) {
    CAPTURE(config.dump());
    check_glu_vjp_outputs(bf16, inputs, run_glu_vjp(cpu, bf16, inputs, config));
  }
}

TEST_CASE("cpu gated_linear_unit_vjp runs its bf16 products on the AMX tiles (emulated anywhere)",
          "[glu_vjp][amx]") {
  const Implementation& cpu = gated_linear_unit_vjp_op().implementation("cpu");
  const BoundArgs bf16 = gated_linear_unit_vjp_op().bind({{"x", "bf16[37,50]"},
                                                          {"weights", "bf16[50,2,41]"},
                                                          {"activation", "gelu"},
                                                          {"dout", "bf16[37,41]"}});
  const TensorMap inputs = gated_linear_unit_vjp_op().make_inputs(bf16, 5);
  testing::for_each_tile_mode([&](cpu::TileMode) {
    for (const json& config : {json{{"bf16_path", "amx"}}, json{{"bf16_path", "amx"},
                                                                {"tile_m", 14},
                                                                {"tile_n", 32},
                                                                {"tile_k", 7},
                                                                {"panel_n", 32},
                                                                {"num_threads", 2}}}) {
      CAPTURE(config.dump());
      check_glu_vjp_outputs(bf16, inputs, run_glu_vjp(cpu, bf16, inputs, config));
    }
    int amx = 0;
    for (const json& c : autotuning_configs_json(cpu, bf16)) amx += c.at("bf16_path") == "amx";
    CHECK(amx > 0);
  });
}
