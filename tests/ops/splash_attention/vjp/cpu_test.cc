// Tests of splash_attention_vjp: the cpu implementation (the flash-attention core's backward
// under a key mask) and the reference against the float64 oracle for every mask class,
// segments, sinks (dsinks), soft cap, MQA and the logsumexp / out inputs, on every SIMD target;
// upstream's terms of rows that see no key (w_r = 1 with the default mask_value, 0 with
// another); the oracle fails gradients that drop them or flip dsinks; bind names bad arguments.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/splash_attention/vjp/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/simd_targets.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const SplashAttentionVjpOp& op() { return splash_attention_vjp_op(); }

std::vector<json> cases() {
  const json base = {
      {"q", "f32[4,37,16]"}, {"k", "f32[2,41,16]"}, {"v", "f32[2,41,8]"}, {"dout", "f32[4,37,8]"}};
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
  // Keyless rows (offset -6) with the residuals given.
  json given = out[1];
  given["logsumexp"] = "f32[4,37]";
  given["out"] = "f32[4,37,8]";
  out.push_back(given);
  json segments = base;
  segments["mask"] = "causal";
  segments["q_segment_ids"] = "i32[37]";
  segments["kv_segment_ids"] = "i32[41]";
  segments["sinks"] = "f32[4]";
  out.push_back(segments);
  json bf16 = {{"q", "bf16[3,29,32]"}, {"k", "bf16[29,32]"},
               {"v", "bf16[29,32]"},   {"dout", "bf16[3,29,32]"},
               {"is_mqa", true},       {"attn_logits_soft_cap", 3.0},
               {"sinks", "f32[3]"},    {"mask", {{"causal_mask", {{"offset", -2}}}}}};
  out.push_back(bf16);
  // A cap on rows that see no key (w_r = 1: the cap's gate of every key).
  json cap_keyless = out[1];
  cap_keyless["attn_logits_soft_cap"] = 2.5;
  out.push_back(cap_keyless);
  return out;
}

}  // namespace

TEST_CASE("cpu splash_attention_vjp passes the oracle on every target", "[splash_attention]") {
  const Implementation& cpu = op().implementation("cpu");
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const json& c : cases()) {
      const BoundArgs args = op().bind(c);
      const TensorMap inputs = op().make_inputs(args, 5);
      json config = heuristics_config_json(cpu, args);
      config["bf16_path"] = "convert_f32";
      config["block_q"] = 5;  // tasks and blocks cut across the masks' runs
      config["block_kv"] = 7;
      for (const TensorDecl& decl : op().outputs(args)) {
        CAPTURE(args.key(), decl.name);
        CHECK(judge(run_against_oracle(op(), "cpu", args, config, inputs, args, decl.name)) ==
              Disposition::kPassed);
      }
    }
  });
}

TEST_CASE("cpu splash_attention_vjp AMX path passes the oracle (emulated tiles anywhere)",
          "[splash_attention][amx]") {
  // All five products on the tiles, P and dS rounded to bf16, splash's layouts in place.
  testing::for_each_tile_mode([](cpu::TileMode) {
    int checked = 0;
    for (const json& c : cases()) {
      const BoundArgs args = op().bind(c);
      if (SplashAttentionVjpProblem::from(args).fwd.dtype != DType::kBF16) continue;
      const TensorMap inputs = op().make_inputs(args, 11);
      const json config = {
          {"block_q", 6}, {"block_kv", 5}, {"bf16_path", "amx"}, {"num_threads", 2}};
      for (const TensorDecl& decl : op().outputs(args)) {
        CAPTURE(args.key(), decl.name);
        CHECK(judge(run_against_oracle(op(), "cpu", args, config, inputs, args, decl.name)) ==
              Disposition::kPassed);
      }
      ++checked;
    }
    CHECK(checked >= 1);
  });
}

TEST_CASE("splash_attention_vjp reference passes the oracle, which fails dropped terms",
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
  // Rows 0-3 see no key. With the default mask_value upstream weighs each of their keys by
  // w_r = 1: dv_j gets dout_r for every j. The same gradients with those terms dropped (another
  // mask_value makes w_r = 0) fail for dq, dk and dv; with the other mask_value they pass.
  json keyless = {{"q", "f32[2,12,8]"},
                  {"k", "f32[2,12,8]"},
                  {"v", "f32[2,12,8]"},
                  {"dout", "f32[2,12,8]"},
                  {"mask", {{"causal_mask", {{"offset", -4}}}}}};
  json dropped = keyless;
  dropped["mask_value"] = -1e9;
  const BoundArgs keyless_args = op().bind(keyless), dropped_args = op().bind(dropped);
  const TensorMap inputs = op().make_inputs(keyless_args, 3);
  for (const char* output : {"dq", "dk", "dv"}) {
    CAPTURE(output);
    CHECK(judge(run_against_oracle(op(), "cpu", dropped_args, json::object(), inputs, keyless_args,
                                   output)) == Disposition::kFailed);
    CHECK(judge(run_against_oracle(op(), "cpu", dropped_args, json::object(), inputs, dropped_args,
                                   output)) == Disposition::kPassed);
  }
  // dsinks with the wrong sign fails.
  json sinks = keyless;
  sinks["mask"] = "causal";
  sinks["sinks"] = "f32[2]";
  const BoundArgs sinks_args = op().bind(sinks);
  const TensorMap sinks_inputs = op().make_inputs(sinks_args, 4);
  TensorMap outputs = op().allocate_outputs(sinks_args);
  run_json(op().implementation("cpu"), sinks_args, json::object(), sinks_inputs, outputs);
  CHECK(judge(compare_whole_output(op(), sinks_args, sinks_inputs, outputs.at("dsinks"),
                                   "dsinks")) == Disposition::kPassed);
  for (int64_t hq = 0; hq < 2; ++hq) outputs.at("dsinks").set(hq, -outputs.at("dsinks").get(hq));
  CHECK(judge(compare_whole_output(op(), sinks_args, sinks_inputs, outputs.at("dsinks"),
                                   "dsinks")) == Disposition::kFailed);
}

TEST_CASE("splash_attention_vjp bind names each bad argument", "[splash_attention]") {
  const json ok = {
      {"q", "f32[4,8,16]"}, {"k", "f32[2,8,16]"}, {"v", "f32[2,8,16]"}, {"dout", "f32[4,8,16]"}};
  auto with = [&](const char* key, json value) {
    json args = ok;
    args[key] = std::move(value);
    return args;
  };
  std::string message;
  CHECK(bind_error_field(op(), ok) == "<no error>");
  CHECK(bind_error_field(op(), with("logsumexp", "f32[4,8]")) == "<no error>");
  CHECK(bind_error_field(op(), with("out", "f32[4,8,16]")) == "<no error>");
  CHECK(bind_error_field(op(), with("dout", "f32[4,8,8]"), &message) == "dout");
  CHECK(message.rfind("splash_attention_vjp: ", 0) == 0);
  json missing = ok;
  missing.erase("dout");
  CHECK(bind_error_field(op(), missing) == "dout");
  CHECK(bind_error_field(op(), with("logsumexp", "f32[4,9]")) == "logsumexp");
  CHECK(bind_error_field(op(), with("logsumexp", "bf16[4,8]")) == "logsumexp");
  CHECK(bind_error_field(op(), with("logsumexp", 3)) == "logsumexp");
  CHECK(bind_error_field(op(), with("out", "bf16[4,8,16]")) == "out");
  CHECK(bind_error_field(op(), with("return_residuals", true)) == "return_residuals");
  CHECK(bind_error_field(op(), with("k", "f32[3,8,16]"), &message) == "k");
  CHECK(message.rfind("splash_attention_vjp: ", 0) == 0);
  CHECK(bind_error_field(op(), with("dropout_rate", 0.1)) == "dropout_rate");
  // FLOPs: 2 (3 D + 2 d) per visible entry and q head (rows r of 8 see keys [r - 2, r]).
  const BoundArgs local =
      op().bind(with("mask", {{"local_mask", {{"window_size", {2, 0}}, {"offset", 0}}}}));
  CHECK(op().flops(local) == 2.0 * 4 * (3 * 16 + 2 * 16) * (1 + 2 + 3 * 6));
}
