// Tests for the cpu dot_product_attention implementation against the float64 oracle, over
// every option and many tilings, and its configs.
#include <hwy/targets.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_softmax.h"
#include "ops/common/flash_attention/config.h"
#include "ops/framework/errors.h"
#include "tests/ops/dot_product_attention/attention_test_util.h"
#include "tests/ops/impl_calls.h"
#include "tests/simd_targets.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using namespace tokamax::attention_testing;
using nlohmann::json;
using tokamax::testing::for_each_forced_target;

namespace {

const Implementation& cpu_impl() { return dot_product_attention_op().implementation("cpu"); }

// Every option, GQA ratios 1/2/4/8, T != t both ways, lengths that are multiples of no tile,
// fully masked rows, f32/bf16/f16, d != D, broadcast bias and mask.
std::vector<json> test_cases() {
  return {
      {{"q", "f32[2,37,4,32]"}, {"k", "f32[2,45,4,32]"}, {"v", "f32[2,45,4,32]"}},
      {{"q", "bf16[1,50,8,32]"},
       {"k", "bf16[1,50,2,32]"},
       {"v", "bf16[1,50,2,32]"},
       {"is_causal", true}},
      {{"q", "f16[1,33,8,16]"},
       {"k", "f16[1,41,1,16]"},
       {"v", "f16[1,41,1,16]"},
       {"is_causal", true}},
      {{"q", "f32[1,70,2,16]"},
       {"k", "f32[1,23,2,16]"},
       {"v", "f32[1,23,2,16]"},
       {"is_causal", true}},
      {{"q", "f32[3,29,2,16]"},
       {"k", "f32[3,31,2,16]"},
       {"v", "f32[3,31,2,24]"},
       {"q_seq_lengths", {29, 11, 0}},
       {"kv_seq_lengths", {0, 31, 17}}},
      {{"q", "bf16[2,40,4,16]"},
       {"k", "bf16[2,40,4,16]"},
       {"v", "bf16[2,40,4,16]"},
       {"logits_scale", 1.0},
       {"logits_soft_cap", 5.0},
       {"local_window", {7, 3}}},
      {{"q", "bf16[1,64,4,16]"},
       {"k", "bf16[1,64,4,16]"},
       {"v", "bf16[1,64,4,16]"},
       {"is_causal", true},
       {"local_window", {9, 0}}},
      {{"q", "f32[2,21,4,16]"},
       {"k", "f32[2,26,2,16]"},
       {"v", "f32[2,26,2,16]"},
       {"bias", "f32[4,21,26]"},
       {"mask", "bool[2,1,21,26]"}},
      {{"q", "bf16[6,6,2,8]"},
       {"k", "bf16[6,6,2,8]"},
       {"v", "bf16[6,6,2,8]"},
       {"bias", "bf16[1,2,6,6]"},
       {"mask", "bool[6,1,1,6]"}},
      {{"q", "f16[2,2,9,2,8]"},
       {"k", "f16[2,2,12,2,8]"},
       {"v", "f16[2,2,12,2,8]"},
       {"kv_seq_lengths", {12, 0, 5, 1}},
       {"is_causal", true}},
      // upstream's CausalMask with a negative offset and a window; the unnormalized output
      {{"q", "bf16[2,45,4,16]"},
       {"k", "bf16[2,40,2,16]"},
       {"v", "bf16[2,40,2,16]"},
       {"mask", {{"offset", -4}, {"window_size", 11}}},
       {"normalize_output", false}},
      {{"q", "f32[1,30,2,16]"},
       {"k", "f32[1,52,2,16]"},
       {"v", "f32[1,52,2,16]"},
       {"mask", {{"offset", 20}}},
       {"normalize_output", false},
       {"return_residuals", true}},
      // dropout after the softmax (broadcast over the batch; and over heads at rate 0)
      {{"q", "f32[2,33,4,16]"},
       {"k", "f32[2,29,2,16]"},
       {"v", "f32[2,29,2,16]"},
       {"is_causal", true},
       {"dropout_mask", "bool[4,33,29]"},
       {"dropout_rate", 0.3}},
      {{"q", "bf16[1,40,2,16]"},
       {"k", "bf16[1,40,2,16]"},
       {"v", "bf16[1,40,2,16]"},
       {"dropout_mask", "bool[1,1,40,40]"},
       {"normalize_output", false}},
      // odd D (a padded bf16 pair), d != D
      {{"q", "bf16[1,19,2,15]"}, {"k", "bf16[1,37,2,15]"}, {"v", "bf16[1,37,2,9]"}},
      {{"q", "f16[1,19,2,15]"},
       {"k", "f16[1,37,2,15]"},
       {"v", "f16[1,37,2,9]"},
       {"is_causal", true}},
      // decoding: one query row per batch (causal top-left: it sees key 0 only)
      {{"q", "bf16[2,1,8,32]"},
       {"k", "bf16[2,50,2,32]"},
       {"v", "bf16[2,50,2,32]"},
       {"is_causal", true}},
      {{"q", "f32[2,1,8,32]"}, {"k", "f32[2,50,2,32]"}, {"v", "f32[2,50,2,32]"}},
      {{"q", "f32[2,45,4,16]"},
       {"k", "f32[2,52,2,16]"},
       {"v", "f32[2,52,2,8]"},
       {"is_causal", true},
       {"logits_soft_cap", 2.0},
       {"bias", "f32[45,1]"},
       {"mask", "bool[52]"},
       {"q_seq_lengths", {45, 20}},
       {"kv_seq_lengths", {30, 52}},
       {"local_window", {12, 4}}},
  };
}

// Tiny, odd and large tiles (the shared paths round block_kv up to whole micro-kernel strips
// or panels);
// heads grouped or not; every kv packing; both bf16 paths where they apply.
std::vector<json> configs(const BoundArgs& args) {
  const AttentionProblem p = AttentionProblem::from(args);
  std::vector<json> out;
  for (int bq : {1, 7, 16, 64}) {
    for (int bkv : {1, 5, 16, 256}) {
      for (bool group : {true, false}) {
        for (const char* packing : {"shared", "transposed", "per_block"}) {
          json c = {
              {"block_q", bq}, {"block_kv", bkv}, {"group_heads", group}, {"kv_packing", packing}};
          out.push_back(c);
          if (attention_native_bf16_available(p)) {
            c["bf16_path"] = "native_dot";
            out.push_back(c);
          }
        }
      }
    }
  }
  json single = {{"num_threads", 1}};
  out.push_back(single);
  return out;
}

}  // namespace

TEST_CASE("dot_product_attention cpu matches the oracle for every option and tiling",
          "[attention]") {
  if (!cpu::host_cpu().has("avx512_bf16")) {
    WARN("bf16_path=native_dot not tested: this CPU lacks avx512_bf16");
  }
  for (const json& case_args : test_cases()) {
    const BoundArgs args = bind_args(case_args);
    const TensorMap inputs = dot_product_attention_op().make_inputs(args, 17);
    // The oracle once per case; every config is compared with it.
    const OracleSample oracle =
        dot_product_attention_op().oracle(args, inputs, "out", all_indices(args));
    const ErrorModel model = dot_product_attention_op().error_model(args);
    for (const json& config : configs(args)) {
      CAPTURE(args.key(), config.dump());
      const Tensor out = run_impl("cpu", args, inputs, config);
      const Comparison c = compare_to_oracle(out, oracle, model);
      CAPTURE(c.worst_ratio, c.max_abs_error, c.bound, c.worst_index, c.nonfinite);
      REQUIRE(judge(c) == Disposition::kPassed);
    }
  }
}

TEST_CASE("dot_product_attention cpu AMX path matches the oracle (emulated tiles anywhere)",
          "[attention][amx]") {
  testing::for_each_tile_mode([](cpu::TileMode) {
    int checked = 0;
    for (const json& case_args : test_cases()) {
      const BoundArgs args = bind_args(case_args);
      if (AttentionProblem::from(args).dtype != DType::kBF16) continue;
      const TensorMap inputs = dot_product_attention_op().make_inputs(args, 17);
      const OracleSample oracle =
          dot_product_attention_op().oracle(args, inputs, "out", all_indices(args));
      const ErrorModel model = dot_product_attention_op().error_model(args);
      for (int bq : {7, 64}) {
        for (int bkv : {5, 256}) {
          for (bool group : {true, false}) {
            const json config = {{"block_q", bq},
                                 {"block_kv", bkv},
                                 {"group_heads", group},
                                 {"kv_packing", "per_block"},
                                 {"bf16_path", "amx"}};
            CAPTURE(args.key(), config.dump());
            const Comparison c =
                compare_to_oracle(run_impl("cpu", args, inputs, config), oracle, model);
            CAPTURE(c.worst_ratio, c.max_abs_error, c.bound, c.worst_index, c.nonfinite);
            REQUIRE(judge(c) == Disposition::kPassed);
          }
        }
      }
      ++checked;
    }
    CHECK(checked >= 1);
  });
}

TEST_CASE("dot_product_attention cpu takes amx with per-block packing only, by field",
          "[attention][amx]") {
  testing::ScopedTileMode emulated(cpu::TileMode::kEmulated);
  const Implementation& cpu = dot_product_attention_op().implementation("cpu");
  json args_json;
  for (const json& case_args : test_cases()) {
    if (AttentionProblem::from(bind_args(case_args)).dtype == DType::kBF16) args_json = case_args;
  }
  REQUIRE_FALSE(args_json.is_null());
  const BoundArgs args = bind_args(args_json);
  try {
    cpu.prepare(args, cpu::host_device())->kernel({{"bf16_path", "amx"}, {"kv_packing", "shared"}});
    FAIL("amx with shared packing was accepted");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "kv_packing");
  }
  // The heuristics take it on a CPU whose tiles run on the hardware (a described one here).
  cpu::CpuInfo sapphire = cpu::host_cpu();
  sapphire.id = "cpu-described-amx";
  sapphire.isa = {"avx2",     "fma",         "avx512f",  "avx512bw",
                  "avx512vl", "avx512_bf16", "amx_tile", "amx_bf16"};
  const json h = cpu.prepare(args, cpu::CpuDevice(sapphire, false))->heuristics_config();
  CHECK(h.at("bf16_path") == "amx");
  CHECK(h.at("kv_packing") == "per_block");
  // The search space offers it where the tiles run (here: emulated).
  int amx = 0;
  for (const json& c : cpu.prepare(args, cpu::host_device())->autotuning_configs()) {
    amx += c.at("bf16_path") == "amx";
  }
  CHECK(amx > 0);
}

TEST_CASE("dot_product_attention cpu matches the oracle on every SIMD target of this CPU",
          "[attention]") {
  // Highway dispatches to the best target; forcing the narrower ones runs the AVX2 and scalar
  // micro-tiles (the transposed layout then has no tile of 24 accumulators and takes the
  // table's first), softmax columns and packing on this machine too.
  for_each_forced_target({HWY_AVX2, HWY_SCALAR}, [](int64_t target) {
    REQUIRE_FALSE(gemm_has_native_bf16());
    REQUIRE(std::string(cpu::simd_target_name()) == hwy::TargetName(target));
    REQUIRE(std::string(cpu::simd_target_name()) == hwy::TargetName(target));
    for (const json& case_args : test_cases()) {
      const BoundArgs args = bind_args(case_args);
      const TensorMap inputs = dot_product_attention_op().make_inputs(args, 29);
      for (const char* packing : {"shared", "transposed", "per_block"}) {
        for (int bkv : {5, 64}) {
          CAPTURE(args.key(), packing, bkv);
          const Tensor out = run_impl(
              "cpu", args, inputs, {{"block_q", 16}, {"block_kv", bkv}, {"kv_packing", packing}});
          REQUIRE(judge(compare_all(args, inputs, out)) == Disposition::kPassed);
        }
      }
    }
  });
}

TEST_CASE("dot_product_attention cpu heuristics config runs and passes", "[attention]") {
  for (const json& case_args : test_cases()) {
    const BoundArgs args = bind_args(case_args);
    CAPTURE(args.key());
    const TensorMap inputs = dot_product_attention_op().make_inputs(args, 23);
    const Tensor out = run_impl("cpu", args, inputs);
    CHECK(judge(compare_all(args, inputs, out)) == Disposition::kPassed);
  }
}

TEST_CASE("dot_product_attention cpu configs: validation names the field", "[attention]") {
  const BoundArgs f32 =
      bind_args({{"q", "f32[1,8,2,8]"}, {"k", "f32[1,8,2,8]"}, {"v", "f32[1,8,2,8]"}});
  auto field_of = [&](const json& config) -> std::string {
    try {
      check_config_json(cpu_impl(), f32, config);
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return "<no error>";
  };
  CHECK(field_of({{"block_q", 32}}) == "<no error>");
  CHECK(field_of({{"block_q", 0}}) == "block_q");
  CHECK(field_of({{"block_kv", -3}}) == "block_kv");
  CHECK(field_of({{"bf16_path", "fast"}}) == "bf16_path");
  CHECK(field_of({{"bf16_path", "native_dot"}}) == "bf16_path");  // f32 inputs
  CHECK(field_of({{"num_threads", -1}}) == "num_threads");
  CHECK(field_of({{"kv_packing", "none"}}) == "kv_packing");
  CHECK(field_of({{"tile_m", 4}}) == "tile_m");
  CHECK(field_of({{"group_heads", 1}}) == "group_heads");
}

TEST_CASE("dot_product_attention cpu with no keys (t = 0) writes zeros", "[attention]") {
  const BoundArgs args =
      bind_args({{"q", "f32[1,3,2,4]"}, {"k", "f32[1,0,2,4]"}, {"v", "f32[1,0,2,4]"}});
  const TensorMap inputs = dot_product_attention_op().make_inputs(args, 1);
  for (const char* packing : {"shared", "transposed", "per_block"}) {
    const Tensor out = run_impl("cpu", args, inputs, {{"kv_packing", packing}});
    for (int64_t e = 0; e < out.num_elements(); ++e) CHECK(out.get(e) == 0.0);
  }
}

TEST_CASE("dot_product_attention cpu rejects f64 with NotImplemented", "[attention]") {
  const BoundArgs f64 =
      bind_args({{"q", "f64[1,8,2,8]"}, {"k", "f64[1,8,2,8]"}, {"v", "f64[1,8,2,8]"}});
  CHECK_THROWS_AS(check_args(cpu_impl(), f64), NotImplemented);
}

TEST_CASE("dot_product_attention cpu search space is valid and distinct", "[attention]") {
  const BoundArgs args =
      bind_args({{"q", "bf16[1,300,8,64]"}, {"k", "bf16[1,300,2,64]"}, {"v", "bf16[1,300,2,64]"}});
  const std::vector<json> space = autotuning_configs_json(cpu_impl(), args, cpu::host_device());
  REQUIRE(space.size() > 8);
  std::set<std::string> seen;
  for (const json& c : space) {
    CHECK(seen.insert(c.dump()).second);
    CHECK_NOTHROW(check_config_json(cpu_impl(), args, c));
  }
  const json heuristic = heuristics_config_json(cpu_impl(), args, cpu::host_device());
  CHECK_NOTHROW(check_config_json(cpu_impl(), args, heuristic));
}
