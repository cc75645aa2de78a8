// Tests for the cpu ragged_dot implementation against the reference, and its configs.
#include <hwy/targets.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/simd_target.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/ragged_dot/api.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/cpu_int8_kernel.h"
#include "ops/ragged_dot/cpu_kernel.h"
#include "ops/ragged_dot/cpu_tiling.h"
#include "tests/ops/impl_calls.h"
#include "tests/simd_targets.h"
#include "tests/support/fake_device.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using nlohmann::json;
using tokamax::testing::for_each_forced_target;

namespace {

const Implementation& cpu_impl() { return ragged_dot_op().implementation("cpu"); }

// Shapes covering empty groups, one group, odd sizes (7, 13, 33), partial micro-tiles in M and N,
// odd K (a padded bf16 pair), K = 1, rows past the sum, every input and output dtype, mixed
// inputs.
std::vector<json> test_cases() {
  return {
      {{"lhs", "f32[64,32]"}, {"rhs", "f32[4,32,48]"}, {"group_sizes", {0, 7, 13, 33}}},
      {{"lhs", "f32[37,19]"}, {"rhs", "f32[1,19,23]"}, {"group_sizes", {37}}},
      {{"lhs", "f32[20,1]"}, {"rhs", "f32[3,1,16]"}, {"group_sizes", {7, 0, 13}}},
      {{"lhs", "f32[9,8]"}, {"rhs", "f32[2,8,8]"}, {"group_sizes", {0, 0}}},
      {{"lhs", "f32[130,300]"}, {"rhs", "f32[3,300,70]"}, {"group_sizes", {33, 64, 13}}},
      {{"lhs", "f32[40,33]"}, {"rhs", "f32[2,33,200]"}, {"group_sizes", {1, 39}}},
      {{"lhs", "bf16[50,40]"}, {"rhs", "bf16[3,40,72]"}, {"group_sizes", {33, 0, 7}}},
      {{"lhs", "bf16[50,41]"},
       {"rhs", "bf16[3,41,72]"},
       {"group_sizes", {13, 7, 30}},
       {"preferred_element_type", "bf16"}},
      {{"lhs", "bf16[70,19]"},
       {"rhs", "bf16[2,19,100]"},
       {"group_sizes", {1, 66}},
       {"preferred_element_type", "f16"}},
      {{"lhs", "f16[45,24]"}, {"rhs", "f16[2,24,40]"}, {"group_sizes", {33, 7}}},
      {{"lhs", "f16[45,24]"},
       {"rhs", "f16[2,24,40]"},
       {"group_sizes", {7, 33}},
       {"preferred_element_type", "f16"}},
      {{"lhs", "f32[30,17]"},
       {"rhs", "f32[2,17,9]"},
       {"group_sizes", {13, 7}},
       {"preferred_element_type", "bf16"}},
      {{"lhs", "f32[30,17]"},
       {"rhs", "f32[2,17,9]"},
       {"group_sizes", {13, 7}},
       {"preferred_element_type", "f16"}},
      {{"lhs", "f64[25,31]"}, {"rhs", "f64[2,31,12]"}, {"group_sizes", {13, 7}}},
      {{"lhs", "f32[25,31]"},
       {"rhs", "f32[2,31,12]"},
       {"group_sizes", {7, 13}},
       {"preferred_element_type", "f64"}},
      {{"lhs", "bf16[21,10]"},
       {"rhs", "bf16[2,10,33]"},
       {"group_sizes", {14, 7}},
       {"preferred_element_type", "f64"}},
      {{"lhs", "bf16[24,18]"}, {"rhs", "f32[3,18,40]"}, {"group_sizes", {7, 13, 4}}},
      {{"lhs", "f16[24,18]"}, {"rhs", "bf16[3,18,40]"}, {"group_sizes", {7, 13, 4}}},
  };
}

// Runs the cpu implementation with `config` and checks it against the reference (accumulating
// like the kernel, written to f32/f64 so the only output rounding is the implementation's).
void check_against_reference(const BoundArgs& args, const json& config) {
  CAPTURE(args.key(), config.dump());
  const RaggedDotOp& op = ragged_dot_op();
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  const TensorMap inputs = op.make_inputs(args, 11);
  TensorMap outputs = op.allocate_outputs(args);
  Tensor& out = outputs.at("out");
  // NaN everywhere first: every element, including rows past the group sum, must be written.
  for (int64_t i = 0; i < out.num_elements(); ++i) out.set(i, std::nan(""));
  check_args(cpu_impl(), args);
  check_config_json(cpu_impl(), args, config);
  run_json(cpu_impl(), args, config, inputs, outputs);

  const bool f64_acc = p.out_dtype == DType::kF64;
  RaggedDotProblem ref_problem = p;
  ref_problem.out_dtype = f64_acc ? DType::kF64 : DType::kF32;
  Tensor ref(TensorSpec{ref_problem.out_dtype, {p.M, p.N}});
  if (f64_acc) {
    ragged_dot_reference<double>(ref_problem, inputs.at("lhs"), inputs.at("rhs"), ref);
  } else {
    ragged_dot_reference<float>(ref_problem, inputs.at("lhs"), inputs.at("rhs"), ref);
  }
  std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
  std::iota(index.begin(), index.end(), 0);
  const OracleSample oracle = op.oracle(args, inputs, "out", index);

  // Tolerance table: accumulation roundoff per accumulator, output roundoff per output dtype,
  // and an absolute floor for f16's subnormal range.
  const double u_acc = f64_acc ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const std::map<DType, double> u_out = {{DType::kF64, std::ldexp(1.0, -53)},
                                         {DType::kF32, std::ldexp(1.0, -24)},
                                         {DType::kBF16, std::ldexp(1.0, -8)},
                                         {DType::kF16, std::ldexp(1.0, -11)}};
  const std::map<DType, double> abs_floor = {{DType::kF64, 0.0},
                                             {DType::kF32, 0.0},
                                             {DType::kBF16, 0.0},
                                             {DType::kF16, std::ldexp(1.0, -25)}};
  // Both sides accumulate K terms (in different orders: K blocks, bf16 pairs): each may be up to
  // K * u_acc * sum|a*b| from the exact value.
  const double K = static_cast<double>(std::max<int64_t>(p.K, 1));
  for (size_t s = 0; s < index.size(); ++s) {
    const double expected = ref.get(index[s]);
    const double bound = 2 * K * u_acc * oracle.magnitude[s] +
                         u_out.at(p.out_dtype) * std::fabs(expected) + abs_floor.at(p.out_dtype);
    CAPTURE(s, expected, oracle.magnitude[s]);
    REQUIRE(std::fabs(out.get(index[s]) - expected) <= bound);
  }
}

bool is_bf16_inputs(const BoundArgs& args) {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  return p.lhs_dtype == DType::kBF16 && p.rhs_dtype == DType::kBF16 && p.out_dtype != DType::kF64;
}

// Explicit configs for every micro-kernel shape of this CPU's SIMD target, both packings, tiny
// and odd tiles (partial micro-tiles, many K blocks, several panels and tasks per group).
std::vector<json> path_configs(const BoundArgs& args, bool native) {
  const int lanes = cpu::simd_f32_lanes();
  std::vector<json> configs;
  for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
    const int nr = shape.nr_vectors * lanes;
    for (const char* packing : {"packed", "no_pack"}) {
      if (native && std::string(packing) == "no_pack") continue;
      json base = {{"mr", shape.mr},
                   {"nr", nr},
                   {"packing", packing},
                   {"bf16_path", native ? "native_dot" : "convert_f32"}};
      json tiny = base;  // one row per task, K blocks of 1 (odd: a padded pair each)
      tiny.update({{"tile_m", 1}, {"tile_n", nr}, {"tile_k", 1}, {"num_threads", 1}});
      json odd = base;  // tasks of a few micro-panels, two panels per task
      odd.update({{"tile_m", 2 * shape.mr + 1},
                  {"tile_n", nr},
                  {"tile_k", 7},
                  {"task_n", 2 * nr},
                  {"num_threads", 2}});
      json wide = base;
      wide.update({{"tile_m", 5}, {"tile_n", 2 * nr}, {"tile_k", 3}});
      json ragged_panels = base;  // tn not a multiple of nr: a zero-padded strip per panel
      ragged_panels.update({{"tile_m", 9},
                            {"tile_n", nr + std::max(1, nr / 2)},
                            {"tile_k", 5},
                            {"task_n", 2 * nr + 2 * std::max(1, nr / 2)}});
      configs.push_back(tiny);
      configs.push_back(odd);
      configs.push_back(wide);
      configs.push_back(ragged_panels);
    }
  }
  (void)args;
  return configs;
}

}  // namespace

TEST_CASE("cpu ragged_dot matches the reference across shapes, dtypes and configs",
          "[ragged_dot]") {
  const Device& device = cpu::host_device();
  for (const json& args_json : test_cases()) {
    const BoundArgs args = ragged_dot_op().bind(args_json);
    std::vector<json> configs = {heuristics_config_json(cpu_impl(), args, device)};
    for (const json& config : path_configs(args, false)) configs.push_back(config);
    // Several configs of the search space, spread over it.
    const std::vector<json> space = autotuning_configs_json(cpu_impl(), args, device);
    for (size_t i = 0; i < space.size(); i += std::max<size_t>(1, space.size() / 6)) {
      configs.push_back(space[i]);
    }
    for (const json& config : configs) check_against_reference(args, config);
  }
}

TEST_CASE("cpu ragged_dot matches the reference on every SIMD target of this CPU", "[ragged_dot]") {
  // Highway dispatches to the best target; forcing the narrower ones runs the AVX2 kernels
  // (6x16 micro-tiles, 8x8 transposes) and the scalar fallback on this machine too.
  for_each_forced_target({HWY_AVX2, HWY_SCALAR}, [](int64_t target) {
    CAPTURE(cpu::simd_target_name());
    REQUIRE(std::string(cpu::simd_target_name()) == hwy::TargetName(target));
    CHECK_FALSE(gemm_has_native_bf16());
    for (const json& args_json : test_cases()) {
      const BoundArgs args = ragged_dot_op().bind(args_json);
      check_against_reference(args, heuristics_config_json(cpu_impl(), args, cpu::host_device()));
      const std::vector<json> configs = path_configs(args, false);
      for (size_t i = 0; i < configs.size(); i += 2) check_against_reference(args, configs[i]);
    }
  });
}

TEST_CASE("cpu ragged_dot native bf16 path matches the reference", "[ragged_dot]") {
  if (!gemm_has_native_bf16()) {
    WARN(
        "skipped: this CPU has no avx512_bf16 (or no AVX-512 kernels), so bf16_path=native_dot "
        "cannot run here");
    return;
  }
  int checked = 0;
  for (const json& args_json : test_cases()) {
    const BoundArgs args = ragged_dot_op().bind(args_json);
    if (!is_bf16_inputs(args)) continue;
    for (const json& config : path_configs(args, true)) check_against_reference(args, config);
    json heuristics = heuristics_config_json(cpu_impl(), args, cpu::host_device());
    heuristics["bf16_path"] = "native_dot";
    heuristics["packing"] = "packed";
    check_against_reference(args, heuristics);
    ++checked;
  }
  CHECK(checked >= 3);
}

TEST_CASE("cpu ragged_dot AMX path matches the reference, on the tiles' emulation everywhere",
          "[ragged_dot][amx]") {
  testing::for_each_tile_mode([](cpu::TileMode) {
    int checked = 0;
    for (const json& args_json : test_cases()) {
      const BoundArgs args = ragged_dot_op().bind(args_json);
      if (!is_bf16_inputs(args)) continue;
      // The native path's tile sets (K blocks of 1, 3, 5 and 7: odd depths in 32-k tiles; row
      // and column edges), on the tiles.
      for (json config : path_configs(args, true)) {
        config["bf16_path"] = "amx";
        check_against_reference(args, config);
      }
      json heuristics = heuristics_config_json(cpu_impl(), args, cpu::host_device());
      heuristics["bf16_path"] = "amx";
      heuristics["packing"] = "packed";
      check_against_reference(args, heuristics);
      ++checked;
    }
    CHECK(checked >= 3);
    // Several 32 x 32 blocks of whole tiles per task, partial ones at every edge, many K blocks.
    const BoundArgs big = ragged_dot_op().bind(
        {{"lhs", "bf16[300,260]"}, {"rhs", "bf16[3,260,150]"}, {"group_sizes", {131, 0, 160}}});
    check_against_reference(big,
                            {{"bf16_path", "amx"}, {"tile_m", 64}, {"tile_n", 64}, {"tile_k", 64}});
    check_against_reference(
        big,
        {{"bf16_path", "amx"}, {"tile_m", 160}, {"tile_n", 48}, {"tile_k", 100}, {"task_n", 96}});
  });
}

TEST_CASE("cpu ragged_dot refuses bf16_path=amx where no tiles run, naming the field",
          "[ragged_dot][amx]") {
  // The field a config is rejected by, and its message.
  auto rejection = [](const json& args_json) -> std::pair<std::string, std::string> {
    try {
      check_config_json(cpu_impl(), ragged_dot_op().bind(args_json), {{"bf16_path", "amx"}});
    } catch (const InvalidArgument& e) {
      return {e.field(), e.what()};
    }
    return {"<no error>", ""};
  };
  const json bf16 = {{"lhs", "bf16[8,32]"}, {"rhs", "bf16[1,32,16]"}, {"group_sizes", {8}}};
  {
    testing::ScopedTileMode none(cpu::TileMode::kNone);
    const auto [field, message] = rejection(bf16);
    CHECK(field == "bf16_path");
    CHECK_THAT(message, Catch::Contains("amx_bf16") && Catch::Contains("TOKAMAX_AMX=emulate"));
  }
  // Only bf16 inputs: f32 ones cannot run on the tiles even where they exist.
  testing::ScopedTileMode emulated(cpu::TileMode::kEmulated);
  CHECK(rejection(bf16).first == "<no error>");
  const auto [field, message] =
      rejection({{"lhs", "f32[8,32]"}, {"rhs", "f32[1,32,16]"}, {"group_sizes", {8}}});
  CHECK(field == "bf16_path");
  CHECK_THAT(message, Catch::Contains("amx needs bf16 lhs, bf16 rhs or f8e4m3 weights"));
}

TEST_CASE("cpu ragged_dot stays exact on larger tiles and many K blocks", "[ragged_dot]") {
  // Big enough for several full micro-tiles per panel, several panels per task and tasks per
  // group, with partial tiles at every edge.
  const BoundArgs args = ragged_dot_op().bind(
      {{"lhs", "bf16[300,260]"}, {"rhs", "bf16[3,260,150]"}, {"group_sizes", {131, 0, 160}}});
  const int lanes = cpu::simd_f32_lanes();
  const MicroKernelShape shape = micro_kernel_shapes(lanes)[0];
  const int nr = shape.nr_vectors * lanes;
  std::vector<json> configs = {
      {{"mr", shape.mr}, {"nr", nr}, {"tile_m", 64}, {"tile_n", 2 * nr}, {"tile_k", 64}},
      {{"mr", shape.mr},
       {"nr", nr},
       {"tile_m", 160},
       {"tile_n", nr},
       {"tile_k", 100},
       {"task_n", 3 * nr}}};
  if (gemm_has_native_bf16()) {
    for (json config : std::vector<json>(configs)) {
      config["bf16_path"] = "native_dot";
      configs.push_back(config);
    }
  }
  for (const json& config : configs) check_against_reference(args, config);
}

namespace {

// Cases of every epilogue argument: bias, each activation, each fused gate/up, a group_offset,
// K = 0, every output dtype, and an f64 output (the f64 epilogue).
std::vector<json> epilogue_cases() {
  std::vector<json> cases;
  const json base = {{"lhs", "f32[70,33]"},
                     {"rhs", "f32[3,33,44]"},
                     {"group_sizes", {5, 20, 0, 31, 4}},
                     {"group_offset", 1}};
  for (const char* act : {"silu", "gelu", "gelu_tanh", "relu", "sigmoid"}) {
    json c = base;
    c["activation"] = act;
    c["rhs_bias"] = "f32[3,44]";
    cases.push_back(c);
  }
  for (const char* gate_up : {"silu", "gelu", "gelu_erf", "swigluoai"}) {
    for (const char* out : {"f32", "bf16", "f16"}) {
      json c = base;
      c["lhs"] = "bf16[70,33]";
      c["rhs"] = "bf16[3,33,44]";
      c["preferred_element_type"] = out;
      c["fuse_gateup_activation"] = gate_up;
      c["rhs_bias"] = "bf16[3,44]";
      cases.push_back(c);
    }
  }
  cases.push_back({{"lhs", "f32[30,0]"},
                   {"rhs", "f32[2,0,16]"},
                   {"rhs_bias", "f32[2,16]"},
                   {"fuse_gateup_activation", "swigluoai"},
                   {"group_sizes", {10, 12}}});
  cases.push_back({{"lhs", "f64[40,17]"},
                   {"rhs", "f64[2,17,20]"},
                   {"rhs_bias", "f64[2,20]"},
                   {"fuse_gateup_activation", "silu"},
                   {"group_offset", 2},
                   {"group_sizes", {3, 4, 11, 19}}});
  cases.push_back({{"lhs", "f32[40,17]"},
                   {"rhs", "f32[2,17,20]"},
                   {"activation", "gelu"},
                   {"preferred_element_type", "f64"},
                   {"group_sizes", {11, 19}}});
  // Quantized weights: per column and per K block, int8 and e4m3, lhs quantized or not, with
  // the fused gate/up and a group_offset.
  cases.push_back({{"lhs", "bf16[60,48]"},
                   {"rhs", "i8[3,48,40]"},
                   {"rhs_scale", "f32[3,40]"},
                   {"group_sizes", {5, 0, 50}}});
  cases.push_back({{"lhs", "f32[60,48]"},
                   {"rhs", "i8[3,48,40]"},
                   {"rhs_scale", "f32[3,4,40]"},
                   {"maybe_quantize_lhs", true},
                   {"fuse_gateup_activation", "swigluoai"},
                   {"rhs_bias", "f32[3,40]"},
                   {"group_offset", 1},
                   {"group_sizes", {3, 20, 0, 30}}});
  cases.push_back({{"lhs", "bf16[40,32]"},
                   {"rhs", "f8e4m3[2,32,24]"},
                   {"rhs_scale", "bf16[2,2,24]"},
                   {"preferred_element_type", "f32"},
                   {"group_sizes", {21, 19}}});
  cases.push_back({{"lhs", "f32[40,32]"},
                   {"rhs", "f8e4m3[2,32,24]"},
                   {"rhs_scale", "f32[2,24]"},
                   {"maybe_quantize_lhs", true},
                   {"activation", "gelu_tanh"},
                   {"group_sizes", {21, 19}}});
  return cases;
}

// The cpu implementation with `config` against the float64 oracle's bound at every output.
void check_against_oracle(const BoundArgs& args, const json& config) {
  CAPTURE(args.key(), config.dump());
  const RaggedDotOp& op = ragged_dot_op();
  const TensorMap inputs = op.make_inputs(args, 13);
  TensorMap outputs = op.allocate_outputs(args);
  Tensor& out = outputs.at("out");
  for (int64_t i = 0; i < out.num_elements(); ++i) out.set(i, std::nan(""));
  run_json(cpu_impl(), args, config, inputs, outputs);
  std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
  std::iota(index.begin(), index.end(), 0);
  const Comparison c =
      compare_to_oracle(out, op.oracle(args, inputs, "out", index), op.error_model(args));
  CAPTURE(c.worst_ratio, c.max_abs_error, c.worst_index, c.nonfinite);
  REQUIRE(judge(c) == Disposition::kPassed);
}

}  // namespace

TEST_CASE("cpu ragged_dot fuses bias, activation and gate/up on every path and target",
          "[ragged_dot]") {
  auto check_all = [](int64_t) {
    CAPTURE(cpu::simd_target_name());
    for (const json& args_json : epilogue_cases()) {
      const BoundArgs args = ragged_dot_op().bind(args_json);
      std::vector<json> configs = {heuristics_config_json(cpu_impl(), args, cpu::host_device())};
      if (RaggedDotProblem::from(args).out_dtype != DType::kF64) {
        for (const json& config : path_configs(args, false)) configs.push_back(config);
      }
      for (const json& config : configs) check_against_oracle(args, config);
    }
  };
  check_all(0);  // the best target of this CPU
  for_each_forced_target({HWY_AVX2, HWY_SCALAR}, check_all);
}

// maybe_quantize_lhs with int8 weights: per column and per K block, epilogues, long K.
std::vector<json> int8_cases() {
  return {
      // Per column, K not a multiple of 4 (a padded quad), partial strips and row tiles.
      {{"lhs", "bf16[70,37]"},
       {"rhs", "i8[3,37,53]"},
       {"rhs_scale", "f32[3,53]"},
       {"maybe_quantize_lhs", true},
       {"group_sizes", {9, 0, 55}}},
      // Per K block (4 blocks of 24: tk must divide 24), fused gate/up with bias, group_offset.
      {{"lhs", "f32[50,96]"},
       {"rhs", "i8[2,96,100]"},
       {"rhs_scale", "f32[2,4,100]"},
       {"rhs_bias", "f32[2,100]"},
       {"maybe_quantize_lhs", true},
       {"fuse_gateup_activation", "silu"},
       {"group_offset", 1},
       {"group_sizes", {4, 17, 25}}},
      // Wide panels: 64-column packs across strip boundaries, and a tail.
      {{"lhs", "bf16[40,64]"},
       {"rhs", "i8[2,64,200]"},
       {"rhs_scale", "f32[2,200]"},
       {"maybe_quantize_lhs", true},
       {"group_sizes", {13, 27}}},
      // A large K (int32 sums over 2000 products) into f16.
      {{"lhs", "bf16[20,2000]"},
       {"rhs", "i8[1,2000,64]"},
       {"rhs_scale", "f32[1,64]"},
       {"maybe_quantize_lhs", true},
       {"preferred_element_type", "f16"},
       {"group_sizes", {20}}},
  };
}

TEST_CASE("cpu ragged_dot int8 x int8 (vnni) matches the oracle on every tile shape",
          "[ragged_dot]") {
  if (!int8_vnni_available()) {
    WARN("skipped: this CPU has no avx512_vnni, so int8_path=vnni cannot run here");
    return;
  }
  const std::vector<json> cases = int8_cases();
  for (const json& args_json : cases) {
    const BoundArgs args = ragged_dot_op().bind(args_json);
    const json heuristics = heuristics_config_json(cpu_impl(), args, cpu::host_device());
    CHECK(heuristics.at("int8_path") == "vnni");
    std::vector<json> configs = {heuristics};
    for (const auto& [mr, nr] : {std::pair{8, 48}, std::pair{6, 64}}) {
      for (int tk : {4, 8, 24, 100, 512}) {
        for (int tm : {1, mr, 2 * mr + 3}) {
          json c = heuristics;
          c.update({{"mr", mr}, {"nr", nr}, {"tile_k", tk}, {"tile_m", tm}, {"tile_n", nr + 16}});
          configs.push_back(c);
          c["tile_n"] = 4 * nr;
          configs.push_back(c);
        }
      }
    }
    for (const json& config : configs) check_against_oracle(args, config);
  }
  // The f32 path of the same problem stays available; vnni is refused where it cannot run.
  const BoundArgs args = ragged_dot_op().bind(cases[0]);
  json f32 = heuristics_config_json(cpu_impl(), args, cpu::host_device());
  f32.update({{"int8_path", "dequant_f32"}, {"mr", 14}, {"nr", 32}});
  check_against_oracle(args, f32);
  json bad_tile = heuristics_config_json(cpu_impl(), args, cpu::host_device());
  bad_tile.update({{"mr", 14}, {"nr", 32}});
  CHECK_THROWS_AS(check_config_json(cpu_impl(), args, bad_tile), InvalidArgument);
  const BoundArgs float_args = ragged_dot_op().bind(test_cases()[0]);
  json vnni = heuristics_config_json(cpu_impl(), float_args, cpu::host_device());
  vnni.update({{"int8_path", "vnni"}, {"mr", 8}, {"nr", 48}});
  CHECK_THROWS_WITH(check_config_json(cpu_impl(), float_args, vnni),
                    Catch::Contains("maybe_quantize_lhs with i8 rhs"));
}

TEST_CASE("cpu ragged_dot int8 x int8 on AMX tiles matches the oracle (emulated anywhere)",
          "[ragged_dot][amx]") {
  testing::for_each_tile_mode([](cpu::TileMode) {
    for (const json& args_json : int8_cases()) {
      const BoundArgs args = ragged_dot_op().bind(args_json);
      json base = heuristics_config_json(cpu_impl(), args, cpu::host_device());
      base["int8_path"] = "amx";
      check_against_oracle(args, base);
      // K blocks inside one quad tile and across several, row tiles of one row to past a
      // block, panels of an odd number of strips (48 columns: one block and a half).
      for (int tk : {4, 24, 100, 2048}) {
        for (int tm : {1, 32, 67}) {
          for (int tn : {48, 192}) {
            json c = base;
            c.update({{"tile_k", tk}, {"tile_m", tm}, {"tile_n", tn}});
            check_against_oracle(args, c);
          }
        }
      }
    }
  });
  // Refused by field where no tiles run, and for problems that are not int8 x int8.
  testing::ScopedTileMode none(cpu::TileMode::kNone);
  const BoundArgs args = ragged_dot_op().bind(int8_cases()[0]);
  json amx = heuristics_config_json(cpu_impl(), args, cpu::host_device());
  amx["int8_path"] = "amx";
  CHECK_THROWS_WITH(check_config_json(cpu_impl(), args, amx), Catch::Contains("amx_int8"));
  testing::ScopedTileMode emulated(cpu::TileMode::kEmulated);
  const BoundArgs float_args = ragged_dot_op().bind(test_cases()[0]);
  json not_int8 = heuristics_config_json(cpu_impl(), float_args, cpu::host_device());
  not_int8["int8_path"] = "amx";
  CHECK_THROWS_WITH(check_config_json(cpu_impl(), float_args, not_int8),
                    Catch::Contains("maybe_quantize_lhs with i8 rhs"));
}

TEST_CASE("cpu ragged_dot heuristics take the fastest engine each CPU has", "[ragged_dot][amx]") {
  // Described CPUs, so the choice is checked on any host: a Sapphire Rapids with AMX, the same
  // Xeon with its tiles hidden (vdpbf16ps at half the FMA rate), and a Zen 4.
  auto described = [](const char* vendor, std::vector<std::string> isa) {
    cpu::CpuInfo cpu = cpu::host_cpu();
    cpu.id = std::string("cpu-described-") + vendor;
    cpu.vendor = vendor;
    cpu.isa = std::move(isa);
    cpu.simd_bytes = 64;
    cpu.cores = 2;
    return cpu::CpuDevice(cpu, false);
  };
  const std::vector<std::string> avx512 = {"avx2",     "fma",         "avx512f",    "avx512bw",
                                           "avx512vl", "avx512_bf16", "avx512_vnni"};
  std::vector<std::string> with_amx = avx512;
  with_amx.insert(with_amx.end(), {"amx_tile", "amx_bf16", "amx_int8"});
  const cpu::CpuDevice sapphire = described("GenuineIntel", with_amx);
  const cpu::CpuDevice hidden = described("GenuineIntel", avx512);
  const cpu::CpuDevice zen4 = described("AuthenticAMD", avx512);
  const BoundArgs bf16 = ragged_dot_op().bind(
      {{"lhs", "bf16[512,256]"}, {"rhs", "bf16[2,256,256]"}, {"group_sizes", {256, 256}}});
  CHECK(heuristics_config_json(cpu_impl(), bf16, sapphire)["bf16_path"] == "amx");
  CHECK(heuristics_config_json(cpu_impl(), bf16, hidden)["bf16_path"] == "convert_f32");
  CHECK(heuristics_config_json(cpu_impl(), bf16, zen4)["bf16_path"] == "native_dot");
  const BoundArgs int8 = ragged_dot_op().bind(int8_cases()[2]);
  CHECK(heuristics_config_json(cpu_impl(), int8, sapphire)["int8_path"] == "amx");
  CHECK(heuristics_config_json(cpu_impl(), int8, hidden)["int8_path"] == "vnni");
  // Both int8 engines in the AMX machine's search space, so that tune compares them.
  int amx = 0, vnni = 0;
  for (const json& c : autotuning_configs_json(cpu_impl(), int8, sapphire)) {
    amx += c["int8_path"] == "amx";
    vnni += c["int8_path"] == "vnni";
  }
  CHECK(amx > 0);
  CHECK(vnni > 0);
}

TEST_CASE("cpu ragged_dot runs through the high-level API", "[ragged_dot]") {
  const BoundArgs args = ragged_dot_op().bind(test_cases()[0]);
  const TensorMap inputs = ragged_dot_op().make_inputs(args, 1);
  RaggedDotOptions options;
  options.implementation = "cpu";
  const Tensor out =
      ragged_dot(inputs.at("lhs"), inputs.at("rhs"), inputs.at("group_sizes"), options);
  options.implementation = "reference";
  const Tensor ref =
      ragged_dot(inputs.at("lhs"), inputs.at("rhs"), inputs.at("group_sizes"), options);
  REQUIRE(out.num_elements() == ref.num_elements());
  // f32 accumulation both: equal up to a few ulps (K blocking and FMA contraction may differ).
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    CHECK(std::fabs(out.get(i) - ref.get(i)) <= 1e-5 * (1 + std::fabs(ref.get(i))));
  }
}

TEST_CASE("cpu ragged_dot rejects what it does not implement", "[ragged_dot]") {
  // Mixed input dtypes run (each operand is widened while packing); f64 inputs need f64 output.
  const BoundArgs mixed =
      ragged_dot_op().bind({{"lhs", "bf16[8,4]"}, {"rhs", "f32[2,4,8]"}, {"group_sizes", {4, 4}}});
  CHECK_NOTHROW(check_args(cpu_impl(), mixed));
  const BoundArgs narrowing = ragged_dot_op().bind(
      {{"lhs", "f64[8,4]"}, {"rhs", "f64[2,4,8]"}, {"preferred_element_type", "f32"}});
  CHECK_THROWS_AS(check_args(cpu_impl(), narrowing), NotImplemented);
  CHECK_THROWS_WITH(check_args(cpu_impl(), narrowing), Catch::Contains("f64"));
  CHECK(cpu_impl().supported_on(cpu::host_device()).ok);
  const testing::FakeDevice gpu("cuda");
  CHECK_FALSE(cpu_impl().supported_on(gpu).ok);
  CHECK_THAT(cpu_impl().supported_on(gpu).reason, Catch::Contains("cuda"));
}

TEST_CASE("cpu ragged_dot check_config rejects configs this CPU or problem cannot run",
          "[ragged_dot]") {
  auto field_of = [](const BoundArgs& args, const json& config) -> std::string {
    try {
      check_config_json(cpu_impl(), args, config);
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return "<no error>";
  };
  const int lanes = cpu::simd_f32_lanes();
  const MicroKernelShape shape = micro_kernel_shapes(lanes)[0];
  const int nr = shape.nr_vectors * lanes;
  const BoundArgs f32_args = ragged_dot_op().bind(test_cases()[0]);
  const BoundArgs bf16_args = ragged_dot_op().bind(test_cases()[6]);
  // A micro-tile the target does not instantiate.
  CHECK(field_of(f32_args, {{"mr", 13}, {"nr", nr}, {"tile_n", nr}}) == "mr");
  CHECK(field_of(f32_args, {{"mr", shape.mr}, {"nr", nr}, {"tile_n", nr}}) == "<no error>");
  // native_dot: bf16 inputs only, packed only, and only on CPUs with avx512_bf16.
  CHECK(field_of(f32_args,
                 {{"mr", shape.mr}, {"nr", nr}, {"tile_n", nr}, {"bf16_path", "native_dot"}}) ==
        "bf16_path");
  const json native = {{"mr", shape.mr}, {"nr", nr}, {"tile_n", nr}, {"bf16_path", "native_dot"}};
  if (gemm_has_native_bf16()) {
    CHECK(field_of(bf16_args, native) == "<no error>");
    json no_pack = native;
    no_pack["packing"] = "no_pack";
    CHECK(field_of(bf16_args, no_pack) == "packing");
  } else {
    WARN("native_dot acceptance not checked: this CPU has no avx512_bf16");
    CHECK(field_of(bf16_args, native) == "bf16_path");
  }
}

TEST_CASE("cpu ragged_dot heuristics are valid for every shape and device", "[ragged_dot]") {
  cpu::CpuInfo unknown_caches = cpu::host_cpu();  // containers may report no cache sizes
  unknown_caches.cores = 3;
  unknown_caches.l1d_bytes = unknown_caches.l2_bytes = unknown_caches.l3_bytes = 0;
  cpu::CpuInfo big = cpu::host_cpu();
  big.cores = 256;
  big.l1d_bytes = 64 << 10;
  big.l2_bytes = 4 << 20;
  const cpu::CpuDevice described[] = {{unknown_caches, false}, {big, false}};
  const std::vector<const Device*> devices = {&cpu::host_device(), &described[0], &described[1]};
  std::vector<json> cases = test_cases();
  cases.push_back({{"lhs", "bf16[8,4096]"},
                   {"rhs", "bf16[8,4096,4096]"},
                   {"group_sizes", {1, 1, 1, 1, 1, 1, 1, 1}}});
  cases.push_back({{"lhs", "bf16[2048,2048]"},
                   {"rhs", "bf16[8,2048,2048]"},
                   {"group_sizes", {2048, 0, 0, 0, 0, 0, 0, 0}},
                   {"preferred_element_type", "bf16"}});
  for (const Device* device : devices) {
    for (const json& args_json : cases) {
      const BoundArgs args = ragged_dot_op().bind(args_json);
      const json config = heuristics_config_json(cpu_impl(), args, *device);
      CAPTURE(args.key(), config.dump(), cpu::cpu_info(*device).cores);
      CHECK(cpu_impl().canonical_config(config) == config);
      CHECK_NOTHROW(check_config_json(cpu_impl(), args, config));
    }
  }
}

TEST_CASE("cpu ragged_dot heuristics follow the problem", "[ragged_dot]") {
  const cpu::CpuInfo& device = cpu::host_cpu();
  // One big group on few cores: the rows are split into tasks so every core has work.
  const BoundArgs square = ragged_dot_op().bind({{"lhs", "f32[2048,2048]"},
                                                 {"rhs", "f32[8,2048,2048]"},
                                                 {"group_sizes", {2048, 0, 0, 0, 0, 0, 0, 0}}});
  const json c = heuristics_config_json(cpu_impl(), square);
  CAPTURE(c.dump());
  const int64_t tasks = ceil_div(2048, c["tile_m"].get<int>()) *
                        (c["task_n"].get<int>() == 0 ? 1 : ceil_div(2048, c["task_n"].get<int>()));
  CHECK(tasks >= device.cores);
  CHECK(c["num_threads"] == 0);
  // The rhs panel fits in L2 and the lhs micro-panel in L1.
  if (device.l2_bytes > 0) {
    CHECK(c["tile_k"].get<int64_t>() * c["tile_n"].get<int64_t>() * 4 <= device.l2_bytes);
  }
  if (device.l1d_bytes > 0) {
    CHECK(c["tile_k"].get<int64_t>() * c["mr"].get<int64_t>() * 4 <= device.l1d_bytes);
  }
  // A tiny call runs on the caller.
  const BoundArgs tiny = ragged_dot_op().bind(test_cases()[1]);
  CHECK(heuristics_config_json(cpu_impl(), tiny)["num_threads"] == 1);
}

TEST_CASE("cpu ragged_dot int8 heuristics pick the tile that pads least", "[ragged_dot]") {
  // A described AVX512-VNNI CPU, so the choice is checked on any host.
  cpu::CpuInfo vnni = cpu::host_cpu();
  vnni.isa = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"};
  vnni.cores = 2;
  vnni.l1d_bytes = 32 << 10;
  vnni.l2_bytes = 1 << 20;
  const cpu::CpuDevice device(vnni, false);
  auto tile = [&](int64_t N, const char* gate_up) {
    json args = {{"lhs", "bf16[192,256]"},
                 {"rhs", "i8[4,256," + std::to_string(N) + "]"},
                 {"rhs_scale", "f32[4," + std::to_string(N) + "]"},
                 {"maybe_quantize_lhs", true},
                 {"group_sizes", {48, 48, 48, 48}}};  // whole panels of 6 and of 8 rows
    if (gate_up != nullptr) args["fuse_gateup_activation"] = gate_up;
    const json c = heuristics_config_json(cpu_impl(), ragged_dot_op().bind(args), device);
    CAPTURE(N, c.dump());
    CHECK(c["int8_path"] == "vnni");
    return std::pair{c["mr"].get<int>(), c["nr"].get<int>()};
  };
  // gpt-oss's halves of 1440 columns are 30 strips of 48; 64 would pad 2%.
  CHECK(tile(2880, "swigluoai") == std::pair{8, 48});
  // DeepSeek's halves of 512 are 8 strips of 64; 48 would leave a third of the last empty.
  CHECK(tile(1024, "silu") == std::pair{6, 64});
  CHECK(tile(512, nullptr) == std::pair{6, 64});
  // Equal padding keeps the 8x48 tile.
  CHECK(tile(192, nullptr) == std::pair{8, 48});
}

TEST_CASE("cpu ragged_dot autotuning configs are valid, distinct and round-trip", "[ragged_dot]") {
  const BoundArgs args = ragged_dot_op().bind(
      {{"lhs", "bf16[256,256]"}, {"rhs", "bf16[4,256,256]"}, {"group_sizes", {64, 64, 64, 64}}});
  const std::vector<json> configs = autotuning_configs_json(cpu_impl(), args, cpu::host_device());
  CHECK(configs.size() >= 8);
  std::set<std::string> distinct, paths, packings;
  for (const json& config : configs) {
    CAPTURE(config.dump());
    CHECK(cpu_impl().canonical_config(config) == config);
    CHECK_NOTHROW(check_config_json(cpu_impl(), args, config));
    distinct.insert(config.dump());
    paths.insert(config["bf16_path"].get<std::string>());
    packings.insert(config["packing"].get<std::string>());
  }
  CHECK(distinct.size() == configs.size());
  CHECK(packings.size() == 2);
  // Both bf16 paths are offered to the tuner where the CPU has the native one.
  CHECK(paths.size() == (gemm_has_native_bf16() ? 2u : 1u));

  // ci-sized shapes, tiny extents included, still get a real search space.
  for (const json& args_json : test_cases()) {
    const BoundArgs small = ragged_dot_op().bind(args_json);
    if (RaggedDotProblem::from(small).rows() == 0) continue;  // nothing to tune
    CAPTURE(small.key());
    CHECK(autotuning_configs_json(cpu_impl(), small, cpu::host_device()).size() >= 8);
  }

  const BoundArgs large = ragged_dot_op().bind(
      {{"lhs", "bf16[8192,4096]"}, {"rhs", "bf16[8,4096,2048]"}, {"group_sizes", nullptr}});
  cpu::CpuInfo two_mib_l2 = cpu::host_cpu();
  two_mib_l2.l2_bytes = 2 << 20;
  CHECK(autotuning_configs_json(cpu_impl(), large, cpu::CpuDevice(two_mib_l2, false)).size() >= 24);
}

TEST_CASE("cpu ragged_dot config JSON is strict and names the bad field", "[ragged_dot]") {
  auto field_of = [](const json& config) -> std::string {
    try {
      cpu_impl().canonical_config(config);
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return "<no error>";
  };
  CHECK(field_of({{"tile_m", 32}, {"tile_n", 64}, {"tile_k", 64}}) == "<no error>");
  CHECK(field_of({{"tile_x", 1}}) == "tile_x");
  // Configs cached before mr/nr existed still load (tile_n not a multiple of nr).
  CHECK(field_of({{"num_threads", 1}, {"tile_k", 32}, {"tile_m", 32}, {"tile_n", 48}}) ==
        "<no error>");
  CHECK(field_of({{"tile_n", 0}}) == "tile_n");
  CHECK(field_of({{"tile_m", 0}}) == "tile_m");
  CHECK(field_of({{"tile_k", 0}}) == "tile_k");
  CHECK(field_of({{"tile_m", "big"}}) == "tile_m");
  CHECK(field_of({{"task_n", 100}, {"tile_n", 64}}) == "task_n");
  CHECK(field_of({{"mr", 0}}) == "mr");
  CHECK(field_of({{"nr", 0}}) == "nr");
  CHECK(field_of({{"packing", "maybe"}}) == "packing");
  CHECK(field_of({{"bf16_path", "fast"}}) == "bf16_path");
  CHECK(field_of({{"num_threads", -1}}) == "num_threads");

  const BoundArgs args = ragged_dot_op().bind(test_cases()[0]);
  const int too_many = 4 * cpu::host_cpu().cores + 1;
  try {
    check_config_json(cpu_impl(), args, {{"num_threads", too_many}});
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "num_threads");
  }
}
