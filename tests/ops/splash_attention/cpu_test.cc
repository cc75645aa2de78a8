// Tests of splash_attention: the cpu implementation (the flash-attention core under a key mask)
// and the reference against the float64 oracle for every mask class, segments, sinks and
// residuals, on every SIMD target and kernel layout; the oracle fails a wrong mask, a dropped
// sink or rows without keys left at zero; bind names bad arguments.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/splash_attention/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/simd_targets.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const SplashAttentionOp& op() { return splash_attention_op(); }

std::vector<json> cases() {
  const json base = {{"q", "f32[4,37,16]"},
                     {"k", "f32[2,41,16]"},
                     {"v", "f32[2,41,8]"},
                     {"return_residuals", true}};
  std::vector<json> out;
  for (const json& mask :
       {json("causal"), json{{"causal_mask", {{"offset", -6}}}},
        json{{"local_mask", {{"window_size", {5, 3}}, {"offset", 2}}}},
        json{{"chunked_causal_mask", {{"chunk_size", 8}}}},
        json{{"logical_or",
              {{{"local_mask", {{"window_size", {2, 2}}, {"offset", 0}}}},
               {{"logical_and", {"causal", {{"chunked_causal_mask", {{"chunk_size", 16}}}}}}}}}}}) {
    json c = base;
    c["mask"] = mask;
    out.push_back(c);
  }
  json segments = base;
  segments["mask"] = "causal";
  segments["q_segment_ids"] = "i32[37]";
  segments["kv_segment_ids"] = "i32[41]";
  segments["sinks"] = "f32[4]";
  out.push_back(segments);
  json bf16 = {{"q", "bf16[3,29,32]"},
               {"k", "bf16[29,32]"},
               {"v", "bf16[29,32]"},
               {"is_mqa", true},
               {"attn_logits_soft_cap", 3.0},
               {"sinks", "f32[3]"},
               {"mask", {{"causal_mask", {{"offset", -2}}}}},
               {"return_residuals", true}};
  out.push_back(bf16);
  return out;
}

}  // namespace

TEST_CASE("cpu splash_attention passes the oracle on every target and layout",
          "[splash_attention]") {
  const Implementation& cpu = op().implementation("cpu");
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const json& c : cases()) {
      const BoundArgs args = op().bind(c);
      const TensorMap inputs = op().make_inputs(args, 5);
      for (const char* packing : {"shared", "transposed", "per_block"}) {
        json config = heuristics_config_json(cpu, args);
        config["kv_packing"] = packing;
        config["bf16_path"] = "convert_f32";
        config["block_q"] = 5;  // tasks and blocks cut across the masks' runs
        config["block_kv"] = 7;
        for (const TensorDecl& decl : op().outputs(args)) {
          CAPTURE(args.key(), config.dump(), decl.name);
          const Comparison result =
              run_against_oracle(op(), "cpu", args, config, inputs, args, decl.name);
          CHECK(judge(result) == Disposition::kPassed);
        }
      }
    }
  });
}

TEST_CASE("cpu splash_attention AMX path passes the oracle (emulated tiles anywhere)",
          "[splash_attention][amx]") {
  // bf16 on the tiles, per-block packing, reading splash's layouts in place.
  testing::for_each_tile_mode([](cpu::TileMode) {
    int checked = 0;
    for (const json& c : cases()) {
      const BoundArgs args = op().bind(c);
      if (SplashAttentionProblem::from(args).dtype != DType::kBF16) continue;
      const TensorMap inputs = op().make_inputs(args, 11);
      for (const bool group : {true, false}) {
        const json config = {{"block_q", 6},
                             {"block_kv", 5},
                             {"group_heads", group},
                             {"kv_packing", "per_block"},
                             {"bf16_path", "amx"}};
        for (const TensorDecl& decl : op().outputs(args)) {
          CAPTURE(args.key(), config.dump(), decl.name);
          CHECK(judge(run_against_oracle(op(), "cpu", args, config, inputs, args, decl.name)) ==
                Disposition::kPassed);
        }
      }
      ++checked;
    }
    CHECK(checked >= 1);
  });
}

TEST_CASE("splash_attention reference passes the oracle, which fails wrong masks and sinks",
          "[splash_attention]") {
  for (const json& c : cases()) {
    const BoundArgs args = op().bind(c);
    const TensorMap inputs = op().make_inputs(args, 7);
    for (const TensorDecl& decl : op().outputs(args)) {
      CAPTURE(args.key(), decl.name);
      CHECK(judge(run_against_oracle(op(), "reference", args, json::object(), inputs, args,
                                     decl.name)) == Disposition::kPassed);
    }
  }
  // Outputs of a full mask judged against a causal one's oracle; without the sinks against
  // the oracle with them; causal with offset -4 (rows 0-3 see no key: the mean of v) against
  // a kernel that leaves them 0 (offset -4 of a [T, t + 4] problem's first keys... here: the
  // same problem with those rows' keys zeroed out of v is not the mean).
  json causal = {{"q", "f32[2,12,8]"}, {"k", "f32[2,12,8]"}, {"v", "f32[2,12,8]"}};
  json full = causal;
  causal["mask"] = "causal";
  const BoundArgs causal_args = op().bind(causal), full_args = op().bind(full);
  const TensorMap inputs = op().make_inputs(causal_args, 3);
  CHECK(judge(run_against_oracle(op(), "cpu", full_args, json::object(), inputs, causal_args,
                                 "out")) == Disposition::kFailed);
  json sinks = causal;
  sinks["sinks"] = "f32[2]";
  const BoundArgs sinks_args = op().bind(sinks);
  TensorMap with_sinks = op().make_inputs(sinks_args, 3);
  CHECK(judge(run_against_oracle(op(), "cpu", causal_args, json::object(), with_sinks, sinks_args,
                                 "out")) == Disposition::kFailed);
  // Rows without a key are the mean of v: zeros there fail.
  json shifted = causal;
  shifted["mask"] = {{"causal_mask", {{"offset", -4}}}};
  const BoundArgs shifted_args = op().bind(shifted);
  TensorMap outputs = op().allocate_outputs(shifted_args);
  run_json(op().implementation("cpu"), shifted_args, json::object(), inputs, outputs);
  CHECK(judge(compare_whole_output(op(), shifted_args, inputs, outputs.at("out"), "out")) ==
        Disposition::kPassed);
  for (int64_t hq = 0; hq < 2; ++hq) {
    for (int64_t c = 0; c < 8; ++c) outputs.at("out").set(hq * 12 * 8 + c, 0.0);
  }
  CHECK(judge(compare_whole_output(op(), shifted_args, inputs, outputs.at("out"), "out")) ==
        Disposition::kFailed);
}

TEST_CASE("splash_attention bind names each bad argument", "[splash_attention]") {
  const json ok = {{"q", "f32[4,8,16]"}, {"k", "f32[2,8,16]"}, {"v", "f32[2,8,16]"}};
  auto with = [&](const char* key, json value) {
    json args = ok;
    args[key] = std::move(value);
    return args;
  };
  CHECK(bind_error_field(op(), ok) == "<no error>");
  CHECK(bind_error_field(op(), with("k", "f32[3,8,16]")) == "k");  // 4 % 3 heads
  CHECK(bind_error_field(op(), with("k", "f32[2,8,8]")) == "k");   // D
  CHECK(bind_error_field(op(), with("k", "f32[2,0,16]")) == "k");  // no keys
  CHECK(bind_error_field(op(), with("v", "f32[2,9,16]")) == "v");
  CHECK(bind_error_field(op(), with("v", "bf16[2,8,16]")) == "v");
  CHECK(bind_error_field(op(), with("mask", {{"causal_mask", {{"offset", "x"}}}})) == "mask");
  CHECK(bind_error_field(op(), with("sinks", "f32[3]")) == "sinks");
  CHECK(bind_error_field(op(), with("q_segment_ids", "i32[8]")) == "kv_segment_ids");
  json segments = with("q_segment_ids", "i32[8]");
  segments["kv_segment_ids"] = "f32[8]";
  CHECK(bind_error_field(op(), segments) == "kv_segment_ids");
  CHECK(bind_error_field(op(), with("segment_ids", {{"q", "i32[8]"}})) == "segment_ids");
  CHECK(bind_error_field(op(), with("mask_value", -1.0)) == "mask_value");
  CHECK(bind_error_field(op(), with("attn_logits_soft_cap", 0.0)) == "attn_logits_soft_cap");
  CHECK(bind_error_field(op(), with("dropout_rate", 0.1)) == "dropout_rate");
  CHECK(bind_error_field(op(), with("is_mqa", true)) == "k");  // 3-D k with 2 heads
  CHECK(bind_error_field(op(), with("scale", 0.5)) == "scale");
}
