// Tests of fused_moe's cpu (fused) and composite (chained ops) implementations against the
// float64 oracle: every dtype, activation and bias, quantized experts, tasks split inside an
// expert and the few-row streaming path, every SIMD target and bf16 engine this CPU has; and the
// cpu configs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/fused_moe/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const Implementation& cpu_impl() { return fused_moe_op().implementation("cpu"); }

json layer(const std::string& dtype, int64_t T, int64_t H, int64_t E, int64_t I, int64_t k) {
  auto shape = [&](std::initializer_list<int64_t> dims) {
    std::string text = dtype + "[";
    for (int64_t d : dims) text += (text.back() == '[' ? "" : ",") + std::to_string(d);
    return text + "]";
  };
  return {{"x", shape({T, H})},
          {"w1", shape({E, H, 2 * I})},
          {"w2", shape({E, I, H})},
          {"gating", "f32[" + std::to_string(T) + "," + std::to_string(E) + "]"},
          {"topk", k}};
}

json with(json args, const char* key, json value) {
  args[key] = std::move(value);
  return args;
}

}  // namespace

TEST_CASE("cpu fused_moe passes the oracle for every config on every SIMD target", "[fused_moe]") {
  const std::vector<json> cases = {
      layer("bf16", 40, 64, 4, 24, 2),
      with(with(layer("f32", 33, 20, 5, 9, 3), "act_fn", "swigluoai"), "w1_bias", "f32[5,1,18]"),
      with(with(layer("f16", 17, 24, 3, 8, 2), "act_fn", "silu_and_mul_with_clamp"), "w2_bias",
           "f16[3,1,24]"),
      with(layer("bf16", 6, 96, 16, 32, 2), "renormalize", false),  // 1-2 rows per expert
      layer("bf16", 3, 40, 2, 16, 2),                               // k = E
  };
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const json& c : cases) {
      const BoundArgs args = fused_moe_op().bind(c);
      const TensorMap inputs = fused_moe_op().make_inputs(args, 3);
      json split = heuristics_config_json(cpu_impl(), args);
      split["tile_m"] = 5;  // tasks cut inside an expert, tails of a micro-panel
      split["num_threads"] = 2;
      std::vector<json> configs = {heuristics_config_json(cpu_impl(), args), split};
      const std::vector<json> space = autotuning_configs_json(cpu_impl(), args);
      for (const json& candidate : space) {
        if (candidate["bf16_path"] != configs.front()["bf16_path"]) configs.push_back(candidate);
      }
      for (const json& cfg : configs) {
        CAPTURE(args.key(), cfg.dump());
        const Comparison result =
            run_against_oracle(fused_moe_op(), "cpu", args, cfg, inputs, args, "out");
        CHECK(judge(result) == Disposition::kPassed);
      }
    }
  });
}

TEST_CASE("composite fused_moe (the chained cpu ops) passes the oracle", "[fused_moe]") {
  const std::vector<json> cases = {
      layer("bf16", 40, 64, 4, 24, 2),
      with(with(layer("f32", 33, 20, 5, 9, 3), "act_fn", "swigluoai"), "w2_bias", "f32[5,1,20]"),
      with(layer("f16", 9, 16, 6, 8, 4), "w1_bias", "f16[6,1,16]"),
  };
  for (const json& c : cases) {
    const BoundArgs args = fused_moe_op().bind(c);
    const TensorMap inputs = fused_moe_op().make_inputs(args, 8);
    CAPTURE(args.key());
    const Comparison result =
        run_against_oracle(fused_moe_op(), "composite", args, json::object(), inputs, args, "out");
    CHECK(judge(result) == Disposition::kPassed);
  }
}

TEST_CASE("quantized fused_moe experts: cpu, composite and reference pass the oracle",
          "[fused_moe]") {
  auto quantized = [&](const std::string& w, const std::string& s1, const std::string& s2,
                       int64_t T = 24) {
    json args = layer("bf16", T, 64, 4, 16, 2);
    args["w1"] = w + "[4,64,32]";
    args["w2"] = w + "[4,16,64]";
    args["w1_scale"] = s1;
    args["w2_scale"] = s2;
    return args;
  };
  const std::vector<json> cases = {
      quantized("i8", "f32[4,32]", "f32[4,64]"),            // per channel
      quantized("f8e4m3", "f32[4,1,1,32]", "f32[4,4,64]"),  // upstream's 4-d, 4 K blocks of I
      with(quantized("i8", "f32[4,2,32]", "f32[4,1,64]"), "act_fn", "swigluoai"),
      with(quantized("f8e4m3", "f32[4,2,32]", "f32[4,2,64]", 90), "x", "f32[90,64]"),
  };
  for (const json& c : cases) {
    const BoundArgs args = fused_moe_op().bind(c);
    const TensorMap inputs = fused_moe_op().make_inputs(args, 6);
    for (const char* impl : {"composite", "reference"}) {
      CAPTURE(args.key(), impl);
      const Comparison result =
          run_against_oracle(fused_moe_op(), impl, args, json::object(), inputs, args, "out");
      CHECK(judge(result) == Disposition::kPassed);
    }
    // cpu: the streaming path (few routes per task) and the engine's tiles (whole experts).
    for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
      json few = heuristics_config_json(cpu_impl(), args);
      few["tile_m"] = 3;
      few["num_threads"] = 2;
      json whole = heuristics_config_json(cpu_impl(), args);
      whole["tile_m"] = 96;
      for (const json& cfg : {heuristics_config_json(cpu_impl(), args), few, whole}) {
        CAPTURE(args.key(), cfg.dump());
        const Comparison result =
            run_against_oracle(fused_moe_op(), "cpu", args, cfg, inputs, args, "out");
        CHECK(judge(result) == Disposition::kPassed);
      }
    });
    // Quantized weights are dequantized to f32: no bf16 engine.
    if (heuristics_config_json(cpu_impl(), args)["bf16_path"] != "convert_f32") FAIL();
  }
  // A scale read from the wrong block fails: the last block's scales doubled.
  const BoundArgs args = fused_moe_op().bind(cases[1]);
  TensorMap inputs = fused_moe_op().make_inputs(args, 6);
  const Tensor& kept = inputs.at("w2_scale");
  Tensor scale(kept.spec());
  for (int64_t i = 0; i < kept.num_elements(); ++i)
    scale.set(i, kept.get(i) * ((i / 64) % 4 == 3 ? 2.0 : 1.0));
  TensorMap wrong = inputs;
  wrong.at("w2_scale") = scale;
  std::vector<int64_t> index(static_cast<size_t>(24 * 64));
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<int64_t>(i);
  for (const char* impl : {"composite", "cpu"}) {
    CAPTURE(impl);
    TensorMap outputs = fused_moe_op().allocate_outputs(args);
    run_json(fused_moe_op().implementation(impl), args,
             std::string(impl) == "cpu" ? heuristics_config_json(cpu_impl(), args) : json::object(),
             wrong, outputs);
    CHECK(judge(compare_to_oracle(outputs.at("out"),
                                  fused_moe_op().oracle(args, inputs, "out", index),
                                  fused_moe_op().error_model(args))) == Disposition::kFailed);
  }
}

TEST_CASE("cpu fused_moe configs: whole-row tasks, scratch within its bound", "[fused_moe]") {
  const BoundArgs prefill = fused_moe_op().bind(layer("bf16", 4096, 1024, 64, 256, 8));
  const BoundArgs decode = fused_moe_op().bind(layer("bf16", 8, 1024, 64, 256, 8));
  const json h = heuristics_config_json(cpu_impl(), prefill);
  CHECK(h["tile_n"] == 0);
  CHECK(h["tile_m"].get<int>() >= 200);  // an expert's 512 routes in three tasks at most
  CHECK(heuristics_config_json(cpu_impl(), decode)["bf16_path"] == "convert_f32");
  const std::vector<json> space = autotuning_configs_json(cpu_impl(), prefill);
  CHECK(space.front() == h);
  CHECK(space.size() > 4);
  auto field = [&](const json& config) {
    try {
      check_config_json(cpu_impl(), prefill, config);
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return std::string("<no error>");
  };
  CHECK(field(h) == "<no error>");
  CHECK(field(with(h, "tile_n", 64)) == "tile_n");
  CHECK(field(with(h, "tile_m", 60000)) == "tile_m");
}
