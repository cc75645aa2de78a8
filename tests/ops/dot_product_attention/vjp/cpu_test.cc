// Tests for the cpu implementation of dot_product_attention_vjp: every forward option and dtype
// against the float64 oracle, with and without the residual lse, small and uneven blocks, one
// and many threads; config validation and the f64 decline.
#include <catch2/catch.hpp>
#include <string>

#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/flash_attention/vjp.h"
#include "ops/dot_product_attention/vjp/api.h"
#include "ops/framework/errors.h"
#include "tests/ops/dot_product_attention/vjp/test_util.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const Implementation& cpu_impl() { return dot_product_attention_vjp_op().implementation("cpu"); }

}  // namespace

TEST_CASE("cpu dot_product_attention_vjp matches the oracle for every option", "[attention_vjp]") {
  for (const std::string dtype : {"f32", "bf16", "f16"}) {
    for (const json& args_json : attention_vjp_cases(dtype)) {
      const BoundArgs args = bind_attention_vjp(args_json);
      const TensorMap inputs = dot_product_attention_vjp_op().make_inputs(args, 3);
      check_attention_vjp_outputs(args, inputs, run_attention_vjp(cpu_impl(), args, inputs));
      // Blocks smaller than the extents and not dividing them, on every thread.
      const json small = {{"block_q", 5}, {"block_kv", 3}, {"num_threads", 0}};
      check_attention_vjp_outputs(args, inputs, run_attention_vjp(cpu_impl(), args, inputs, small));
    }
  }
}

TEST_CASE("cpu dot_product_attention_vjp packs k^T, v^T and k in waves of kv heads",
          "[attention_vjp]") {
  // wave_bytes = 1: one kv head per wave (batch 2 x 2 kv heads: four waves), with GQA, a bias
  // (dk, dv and dbias accumulate in the thread copies across waves) and uneven blocks on two
  // threads.
  for (const json& args_json : {json{{"q", "f32[2,9,4,8]"},
                                     {"k", "f32[2,11,2,8]"},
                                     {"v", "f32[2,11,2,8]"},
                                     {"dout", "f32[2,9,4,8]"},
                                     {"bias", "f32[2,4,9,11]"}},
                                json{{"q", "bf16[2,12,6,8]"},
                                     {"k", "bf16[2,10,2,8]"},
                                     {"v", "bf16[2,10,2,8]"},
                                     {"dout", "bf16[2,12,6,8]"},
                                     {"is_causal", true}}}) {
    CAPTURE(args_json.dump());
    const BoundArgs args = bind_attention_vjp(args_json);
    const TensorMap inputs = dot_product_attention_vjp_op().make_inputs(args, 8);
    const AttentionVjpProblem p = AttentionVjpProblem::from(args);
    FlashVjpOptions options;
    options.block_q = 5;
    options.block_kv = 3;
    options.num_threads = 2;
    TensorMap outputs = dot_product_attention_vjp_op().allocate_outputs(args);
    const bool has_bias = args_json.contains("bias");
    flash_attention_vjp_cpu(p.fwd, options, inputs.at("q"), inputs.at("k"), inputs.at("v"),
                            has_bias ? &inputs.at("bias") : nullptr, nullptr, inputs.at("dout"),
                            nullptr, nullptr, outputs.at("dq"), outputs.at("dk"), outputs.at("dv"),
                            has_bias ? &outputs.at("dbias") : nullptr, /*row_stats=*/{},
                            /*wave_bytes=*/1);
    check_attention_vjp_outputs(args, inputs, outputs);
  }
}

TEST_CASE("cpu dot_product_attention_vjp uses lse and out when given", "[attention_vjp]") {
  // lse alone, out alone, both; GQA + causal, sequence lengths with an empty batch, everything.
  for (const std::string dtype : {"f32", "bf16"}) {
    const std::vector<json> cases = attention_vjp_cases(dtype);
    for (const json& base : {cases[1], cases[3], cases.back()}) {
      const BoundArgs plain = bind_attention_vjp(base);
      const AttentionProblem p = AttentionProblem::from(plain);
      for (int which = 1; which <= 3; ++which) {
        json args_json = base;
        if (which & 1) args_json["lse"] = attention_lse_spec(p).to_string();
        if (which & 2) args_json["out"] = args_json["dout"];
        CAPTURE(args_json.dump());
        const BoundArgs args = bind_attention_vjp(args_json);
        const TensorMap inputs = dot_product_attention_vjp_op().make_inputs(args, 6);
        check_attention_vjp_outputs(
            args, inputs,
            run_attention_vjp(cpu_impl(), args, inputs,
                              {{"block_q", 4}, {"block_kv", 4}, {"num_threads", 2}}));
      }
    }
  }
}

TEST_CASE("cpu dot_product_attention_vjp matches the oracle on larger blocks", "[attention_vjp]") {
  for (const json& args_json : {json{{"q", "f32[1,300,4,64]"},
                                     {"k", "f32[1,260,2,64]"},
                                     {"v", "f32[1,260,2,64]"},
                                     {"dout", "f32[1,300,4,64]"},
                                     {"is_causal", true}},
                                json{{"q", "bf16[2,130,2,32]"},
                                     {"k", "bf16[2,140,2,32]"},
                                     {"v", "bf16[2,140,2,32]"},
                                     {"dout", "bf16[2,130,2,32]"},
                                     {"bias", "bf16[2,1,130,140]"},
                                     {"logits_soft_cap", 5.0}}}) {
    const BoundArgs args = bind_attention_vjp(args_json);
    const TensorMap inputs = dot_product_attention_vjp_op().make_inputs(args, 8);
    check_attention_vjp_outputs(args, inputs, run_attention_vjp(cpu_impl(), args, inputs));
  }
}

TEST_CASE("cpu dot_product_attention_vjp runs every bf16 path", "[attention_vjp]") {
  if (!gemm_has_native_bf16()) WARN("native_dot skipped: this CPU has no avx512_bf16");
  for (const json& args_json : attention_vjp_cases("bf16")) {
    const BoundArgs args = bind_attention_vjp(args_json);
    const TensorMap inputs = dot_product_attention_vjp_op().make_inputs(args, 7);
    for (const char* path : {"convert_f32", "native_dot", "native_all"}) {
      if (std::string(path) != "convert_f32" && !gemm_has_native_bf16()) continue;
      CAPTURE(path);
      const json config = {{"block_q", 6}, {"block_kv", 5}, {"bf16_path", path}};
      check_attention_vjp_outputs(args, inputs,
                                  run_attention_vjp(cpu_impl(), args, inputs, config));
    }
  }
  // native_dot needs bf16 inputs.
  const BoundArgs f32 = bind_attention_vjp(attention_vjp_cases("f32")[0]);
  try {
    check_config_json(cpu_impl(), f32, {{"bf16_path", "native_dot"}});
    FAIL("no error");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "bf16_path");
  }
}

TEST_CASE("cpu dot_product_attention_vjp runs all five products on AMX tiles (emulated anywhere)",
          "[attention_vjp][amx]") {
  testing::for_each_tile_mode([](cpu::TileMode) {
    for (const json& args_json : attention_vjp_cases("bf16")) {
      const BoundArgs args = bind_attention_vjp(args_json);
      const TensorMap inputs = dot_product_attention_vjp_op().make_inputs(args, 7);
      for (const json& config : {json{{"bf16_path", "amx"}},
                                 json{{"block_q", 6}, {"block_kv", 5}, {"bf16_path", "amx"}}}) {
        CAPTURE(config.dump());
        check_attention_vjp_outputs(args, inputs,
                                    run_attention_vjp(cpu_impl(), args, inputs, config));
      }
    }
  });
  // bf16 inputs only, and only where the tiles run (or are emulated).
  const BoundArgs f32 = bind_attention_vjp(attention_vjp_cases("f32")[0]);
  const BoundArgs bf16 = bind_attention_vjp(attention_vjp_cases("bf16")[0]);
  auto field = [&](const BoundArgs& args) -> std::string {
    try {
      check_config_json(cpu_impl(), args, {{"bf16_path", "amx"}});
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return "<no error>";
  };
  testing::ScopedTileMode emulated(cpu::TileMode::kEmulated);
  CHECK(field(f32) == "bf16_path");
  CHECK(field(bf16) == "<no error>");
  testing::ScopedTileMode none(cpu::TileMode::kNone);
  CHECK(field(bf16) == "bf16_path");
}

TEST_CASE("cpu dot_product_attention_vjp config checks name the field", "[attention_vjp]") {
  const BoundArgs args = bind_attention_vjp(attention_vjp_cases("f32")[0]);
  auto field = [&](const json& config) {
    try {
      check_config_json(cpu_impl(), args, config);
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return std::string("<no error>");
  };
  CHECK(field({{"block_q", 64}, {"block_kv", 64}, {"num_threads", 1}}) == "<no error>");
  CHECK(field({{"block_q", 0}, {"block_kv", 64}, {"num_threads", 1}}) == "block_q");
  CHECK(field({{"block_q", 64}, {"block_kv", -1}, {"num_threads", 1}}) == "block_kv");
  CHECK(field({{"block_q", 64}, {"block_kv", 64}, {"num_threads", -2}}) == "num_threads");
  CHECK(field({{"block_q", 64}, {"block_kv", 64}, {"bogus", 1}}) == "bogus");
  CHECK(field({{"bf16_path", "fast"}}) == "bf16_path");
  CHECK_FALSE(autotuning_configs_json(cpu_impl(), args).empty());
}

TEST_CASE("cpu dot_product_attention_vjp keeps the strips of long key sequences bounded",
          "[attention_vjp]") {
  // A task keeps S, dP (and the cap's gate) of its bq rows for all t keys: the heuristics and
  // every autotuning config keep 3 bq t floats under 64 MiB, with bq at least 8.
  for (const int64_t t : {int64_t{2048}, int64_t{131072}, int64_t{1} << 20}) {
    const std::string kv = "f32[1," + std::to_string(t) + ",4,64]";
    const BoundArgs args = bind_attention_vjp(
        {{"q", "f32[1,512,4,64]"}, {"k", kv}, {"v", kv}, {"dout", "f32[1,512,4,64]"}});
    CAPTURE(t);
    auto check = [&](const json& config) {
      const int64_t bq = config.at("block_q").get<int64_t>();
      CHECK(bq >= 8);
      CHECK((3 * 4 * bq * t <= (int64_t{64} << 20) || bq == 8));
    };
    const json heuristics = heuristics_config_json(cpu_impl(), args, cpu::host_device());
    check(heuristics);
    if (t == 2048) CHECK(heuristics.at("block_q") == 128);
    for (const json& config : autotuning_configs_json(cpu_impl(), args)) check(config);
  }
}

TEST_CASE("cpu dot_product_attention_vjp declines f64", "[attention_vjp]") {
  const BoundArgs args = bind_attention_vjp(attention_vjp_cases("f64")[0]);
  CHECK_THROWS_AS(check_args(cpu_impl(), args), NotImplemented);
}
