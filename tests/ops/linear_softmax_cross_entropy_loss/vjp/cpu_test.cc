// Tests for the cpu linear_softmax_cross_entropy_loss_vjp implementation against the oracle over
// shapes, dtypes and configs (its autotuning space included), and its config checks.
#include <catch2/catch.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/framework/errors.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp/api.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp/cpu_config.h"
#include "tests/ops/linear_softmax_cross_entropy_loss/vjp/test_util.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const Implementation& cpu_impl() {
  return linear_softmax_cross_entropy_loss_vjp_op().implementation("cpu");
}

// Every reduction, padding, f32/bf16/f16 and mixed inputs, B = 1, V below a micro-tile and past
// a chunk, H = 1.
std::vector<json> test_cases() {
  return {
      lsce_vjp_json("f32[8,32]", "f32[32,1000]", "none"),
      lsce_vjp_json("f32[1,64]", "f32[64,513]", "sum"),
      lsce_vjp_json("f32[8,16]", "f32[16,7]", "mean"),
      lsce_vjp_json("bf16[40,64]", "bf16[64,1025]", "none", 0.2),
      lsce_vjp_json("bf16[33,40]", "bf16[40,300]", "mean", 0.5),
      lsce_vjp_json("f16[12,40]", "f16[40,257]", "sum", 0.25),
      lsce_vjp_json("f32[20,48]", "bf16[48,600]", "mean"),
      lsce_vjp_json("f16[12,40]", "f32[40,130]", "none"),
      lsce_vjp_json("f32[9,1]", "f32[1,50]", "sum"),
  };
}

// Tiny and odd tiles for every micro-kernel shape: partial micro-tiles, several K blocks per
// product, many chunks and ranges, partial row and dw blocks.
std::vector<json> path_configs(bool native) {
  const int lanes = cpu::simd_f32_lanes();
  std::vector<json> configs;
  for (const MicroKernelShape& shape : micro_kernel_shapes(lanes)) {
    const int nr = shape.nr_vectors * lanes;
    const json base = {
        {"mr", shape.mr}, {"nr", nr}, {"bf16_path", native ? "native_dot" : "convert_f32"}};
    json tiny = base;
    tiny.update({{"chunk_v", 1},
                 {"tile_b", 1},
                 {"tile_h", 1},
                 {"tile_n", 1},
                 {"tile_k", 2},
                 {"v_splits", 3},
                 {"num_threads", 1}});
    json odd = base;
    odd.update({{"chunk_v", nr + 3},
                {"tile_b", 2 * shape.mr + 1},
                {"tile_h", 5},
                {"tile_n", nr},
                {"tile_k", 7},
                {"v_splits", 0},
                {"num_threads", 2}});
    json one_range = base;
    one_range.update({{"chunk_v", 64}, {"tile_b", 7}, {"v_splits", 1}, {"num_threads", 2}});
    configs.push_back(tiny);
    configs.push_back(odd);
    configs.push_back(one_range);
  }
  return configs;
}

}  // namespace

TEST_CASE("cpu lsce_vjp passes the oracle across shapes, dtypes and configs", "[lsce_vjp]") {
  const auto& op = linear_softmax_cross_entropy_loss_vjp_op();
  for (const json& args_json : test_cases()) {
    const BoundArgs args = op.bind(args_json);
    const TensorMap inputs = op.make_inputs(args, 9);
    std::vector<json> configs = {json()};  // the heuristics
    for (const json& c : path_configs(false)) configs.push_back(c);
    const LinearSoftmaxCrossEntropyVjpProblem p = LinearSoftmaxCrossEntropyVjpProblem::from(args);
    if (is_lsce_vjp_bf16_problem(p) && gemm_has_native_bf16()) {
      for (const json& c : path_configs(true)) configs.push_back(c);
    }
    if (is_lsce_vjp_bf16_problem(p)) {  // the AMX tiles, emulated where the CPU has none
      testing::ScopedTileMode emulated(cpu::TileMode::kEmulated);
      // Chunks and row tiles of a few tiles each (the single-column ones of path_configs would
      // pad every product to whole 16 x 16 tiles, slow in the emulation), with K blocks that
      // end inside a tile.
      for (const json& c : {json{{"bf16_path", "amx"}}, json{{"bf16_path", "amx"},
                                                             {"chunk_v", 48},
                                                             {"tile_b", 20},
                                                             {"tile_h", 24},
                                                             {"tile_k", 40},
                                                             {"v_splits", 3}}}) {
        CAPTURE(args.key(), c.dump());
        check_lsce_vjp_outputs(args, inputs, run_lsce_vjp(cpu_impl(), args, inputs, c));
      }
    }
    for (const json& c : autotuning_configs_json(cpu_impl(), args)) configs.push_back(c);
    for (const json& config : configs) {
      CAPTURE(args.key(), config.dump());
      check_lsce_vjp_outputs(args, inputs, run_lsce_vjp(cpu_impl(), args, inputs, config));
    }
  }
}

TEST_CASE("cpu lsce_vjp with the residual lse passes the oracle, and uses it", "[lsce_vjp]") {
  const auto& op = linear_softmax_cross_entropy_loss_vjp_op();
  for (json args_json : {lsce_vjp_json("f32[8,32]", "f32[32,1000]", "none"),
                         lsce_vjp_json("bf16[40,64]", "bf16[64,1025]", "mean", 0.2),
                         lsce_vjp_json("f16[12,40]", "f16[40,257]", "sum", 0.25),
                         lsce_vjp_json("f32[20,48]", "bf16[48,600]", "mean")}) {
    const int64_t B = parse_tensor_spec(args_json.at("x").get<std::string>()).dims[0];
    args_json["lse"] = "f32[" + std::to_string(B) + "]";
    const BoundArgs args = op.bind(args_json);
    const TensorMap inputs = op.make_inputs(args, 9);
    std::vector<json> configs = {json()};
    for (const json& c : path_configs(false)) configs.push_back(c);
    for (const json& config : configs) {
      CAPTURE(args.key(), config.dump());
      check_lsce_vjp_outputs(args, inputs, run_lsce_vjp(cpu_impl(), args, inputs, config));
    }
    // An lse one too large scales every probability by 1/e: the kernel read it, so it fails.
    TensorMap wrong = inputs;
    Tensor shifted(inputs.at("lse").spec());
    for (int64_t b = 0; b < B; ++b) shifted.set(b, inputs.at("lse").get(b) + 1.0);
    wrong.erase("lse");
    wrong.emplace("lse", shifted);
    const TensorMap outputs = run_lsce_vjp(cpu_impl(), args, wrong, json());
    const Tensor& dw = outputs.at("dw");
    std::vector<int64_t> all(static_cast<size_t>(dw.num_elements()));
    std::iota(all.begin(), all.end(), int64_t{0});
    const Comparison c =
        compare_to_oracle(dw, op.oracle(args, inputs, "dw", all), op.error_model(args));
    CHECK(c.violations > 0);
  }
}

TEST_CASE("cpu lsce_vjp is deterministic for a config", "[lsce_vjp]") {
  const auto& op = linear_softmax_cross_entropy_loss_vjp_op();
  const BoundArgs args = op.bind(lsce_vjp_json("f32[30,40]", "f32[40,900]", "sum"));
  const TensorMap inputs = op.make_inputs(args, 3);
  const json config = {{"chunk_v", 64}, {"v_splits", 5}, {"num_threads", 2}};
  const TensorMap a = run_lsce_vjp(cpu_impl(), args, inputs, config);
  const TensorMap b = run_lsce_vjp(cpu_impl(), args, inputs, config);
  for (const char* name : {"dx", "dw"}) {
    for (int64_t i = 0; i < a.at(name).num_elements(); ++i) {
      REQUIRE(a.at(name).get(i) == b.at(name).get(i));
    }
  }
}

TEST_CASE("cpu lsce_vjp declines f64 and refuses configs that cannot run", "[lsce_vjp]") {
  const auto& op = linear_softmax_cross_entropy_loss_vjp_op();
  const BoundArgs f64 = op.bind(lsce_vjp_json("f64[4,4]", "f64[4,8]", "sum"));
  CHECK_THROWS_AS(check_args(cpu_impl(), f64), NotImplemented);
  const BoundArgs f32 = op.bind(lsce_vjp_json("f32[8,4]", "f32[4,40]", "mean"));
  auto field_of = [&](const json& config) -> std::string {
    try {
      check_config_json(cpu_impl(), f32, config);
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return "<no error>";
  };
  const json base = heuristics_config_json(cpu_impl(), f32);
  CHECK(field_of(base) == "<no error>");
  json native = base;
  native["bf16_path"] = "native_dot";  // f32 operands
  CHECK(field_of(native) == "bf16_path");
  json threads = base;
  threads["num_threads"] = 100000;
  CHECK(field_of(threads) == "num_threads");
  json chunk = base;
  chunk["chunk_v"] = 0;
  CHECK(field_of(chunk) == "chunk_v");
  json micro = base;
  micro["mr"] = 3;
  micro["nr"] = 0;
  CHECK(field_of(micro) == "mr");
  json unknown = base;
  unknown["tile_q"] = 1;
  CHECK(field_of(unknown) == "tile_q");
  // The dz tile [B, chunk_v] over its cap.
  const BoundArgs tall = op.bind(lsce_vjp_json("bf16[65536,8]", "bf16[8,4096]", "sum"));
  json wide = heuristics_config_json(cpu_impl(), tall);
  wide["chunk_v"] = 4096;
  try {
    check_config_json(cpu_impl(), tall, wide);
    FAIL("a dz tile over the cap was accepted");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "chunk_v");
  }
}

TEST_CASE("cpu lsce_vjp heuristics use every core on a large head and cap the partials",
          "[lsce_vjp]") {
  const auto& op = linear_softmax_cross_entropy_loss_vjp_op();
  const BoundArgs args = op.bind(lsce_vjp_json("bf16[256,4096]", "bf16[4096,128256]", "mean"));
  const json c = heuristics_config_json(cpu_impl(), args);
  CAPTURE(c.dump());
  CHECK(c.at("num_threads") == 0);
  CHECK(c.at("v_splits") == 0);
  const LinearSoftmaxCrossEntropyVjpProblem p = LinearSoftmaxCrossEntropyVjpProblem::from(args);
  CpuLsceVjpConfig config;
  config.chunk_v = c.at("chunk_v").get<int>();
  for (int threads : {1, 2, 16}) {
    CAPTURE(threads);
    const int64_t nv = cpu_lsce_vjp_v_splits(p, config, threads);
    CHECK(nv % threads == 0);  // whole ranges per thread
    CHECK(nv * p.fwd.B * p.fwd.H <= kCpuLsceVjpMaxPartials);
    // The partials and the per-thread dz tiles stay well below the B * V * 4 bytes of
    // materialised logits (the partials grow with the thread count: 64 MB at 16 threads here).
    const int64_t scratch = nv * p.fwd.B * p.fwd.H * 4 + threads * p.fwd.B * config.chunk_v * 4;
    CHECK(scratch < p.fwd.B * p.fwd.V * 4 * (threads <= 2 ? 1 : 4) / 4);
  }
}
