// Tests of the cpu ragged_paged_attention against the float64 oracle (every output, each
// ci_tests form, tasks cut inside a sequence, prefill on the flash-attention core and staged,
// every SIMD target) and its cache update against the reference's, bit for bit.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/ragged_paged_attention/api.h"
#include "ops/ragged_paged_attention/cpu_core.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const RaggedPagedAttentionOp& op() { return ragged_paged_attention_op(); }

std::vector<json> cases() {
  json base = {{"queries", "bf16[11,6,16]"},
               {"keys", "bf16[11,3,16]"},
               {"values", "bf16[11,3,16]"},
               {"kv_cache", "bf16[20,4,6,32]"},
               {"kv_lens", {7, 12, 2, 9}},
               {"page_indices", {3, 8, 1, 19, 0, 5, 12, 7, 14, 2, 6, 10, 9, 11, 4, 13}},
               {"cu_q_lens", {0, 1, 7, 8, 11}},
               {"distribution", {1, 1, 4}},
               {"sm_scale", 0.25},
               {"return_lse", true}};
  json window = base;
  window["sliding_window"] = 4;
  window["soft_cap"] = 3.0;
  json fp8 = base;
  for (const char* name : {"keys", "values"}) fp8[name] = "f8e4m3[11,3,16]";
  fp8["kv_cache"] = "f8e4m3[20,4,6,32]";
  fp8["k_scale"] = 0.5;
  fp8["v_scale"] = 2.0;
  fp8["q_scale"] = 1.5;
  fp8["out_dtype"] = "f32";
  json f32 = base;
  for (const char* name : {"queries", "keys", "values"}) {
    f32[name] = "f32" + f32[name].get<std::string>().substr(4);
  }
  f32["kv_cache"] = "f32[20,4,6,32]";
  f32["use_causal_mask"] = false;
  f32["distribution"] = {1, 1, 3};  // the last sequence inactive
  // Prefill over more than one 256-key piece of the core's packing, pages of 16 (whole panels)
  // and of 5 keys (staged), with a decode token beside it.
  json longer = {{"queries", "bf16[41,4,16]"}, {"keys", "bf16[41,2,16]"},
                 {"values", "bf16[41,2,16]"},  {"kv_lens", {33, 300}},
                 {"cu_q_lens", {0, 1, 41}},    {"distribution", {1, 1, 2}},
                 {"sm_scale", 0.25},           {"sliding_window", 280}};
  std::vector<json> out = {base, window, fp8, f32};
  for (const int64_t ps : {16, 5}) {
    json c = longer;
    const int64_t per = (300 + ps - 1) / ps, pages = 2 * per;
    c["kv_cache"] = "bf16[" + std::to_string(pages) + "," + std::to_string(ps) + ",4,16]";
    std::vector<int64_t> table;
    for (int64_t q = 0; q < 2 * per; ++q) table.push_back((q * 7 + 3) % pages);
    c["page_indices"] = table;
    out.push_back(c);
  }
  return out;
}

}  // namespace

TEST_CASE("cpu ragged_paged_attention passes the oracle on every SIMD target",
          "[ragged_paged_attention]") {
  const Implementation& cpu = op().implementation("cpu");
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const json& c : cases()) {
      const BoundArgs args = op().bind(c);
      const TensorMap inputs = op().make_inputs(args, 9);
      const bool core = rpa_core_refusal(RaggedPagedAttentionProblem::from(args)).empty();
      for (const char* prefill : {"core", "staged"}) {
        if (!core && std::string(prefill) == "core") continue;
        for (int bq : {0, 1, 3}) {
          json config = heuristics_config_json(cpu, args);
          if (bq > 0) config["block_q"] = bq;
          config["prefill"] = prefill;
          for (const TensorDecl& decl : op().outputs(args)) {
            CAPTURE(args.key(), config.dump(), decl.name);
            const Comparison result =
                run_against_oracle(op(), "cpu", args, config, inputs, args, decl.name);
            CHECK(judge(result) == Disposition::kPassed);
          }
        }
      }
    }
  });
}

TEST_CASE("cpu ragged_paged_attention writes the cache the reference writes",
          "[ragged_paged_attention]") {
  for (const json& c : cases()) {
    const BoundArgs args = op().bind(c);
    const TensorMap inputs = op().make_inputs(args, 2);
    TensorMap a = op().allocate_outputs(args), b = op().allocate_outputs(args);
    run_json(op().implementation("cpu"), args,
             heuristics_config_json(op().implementation("cpu"), args), inputs, a);
    run_json(op().implementation("reference"), args, json::object(), inputs, b);
    const Tensor& x = a.at("updated_kv_cache");
    const Tensor& y = b.at("updated_kv_cache");
    REQUIRE(x.size_bytes() == y.size_bytes());
    CHECK(std::memcmp(x.raw(), y.raw(), x.size_bytes()) == 0);
  }
}

TEST_CASE("cpu ragged_paged_attention runs prefill on the core only where the core can",
          "[ragged_paged_attention]") {
  const Implementation& cpu = op().implementation("cpu");
  const std::vector<json> all = cases();
  const BoundArgs plain = op().bind(all[0]);
  CHECK(heuristics_config_json(cpu, plain)["prefill"] == "core");
  const BoundArgs fp8 = op().bind(all[2]);  // an fp8 cache, out f32, v_scale 2
  CHECK(heuristics_config_json(cpu, fp8)["prefill"] == "staged");
  json config = heuristics_config_json(cpu, fp8);
  config["prefill"] = "core";
  CHECK_THROWS_WITH(check_config_json(cpu, fp8, config),
                    Catch::Contains("prefill") && Catch::Contains("one dtype"));
  json unwindowed = all[3];  // f32, no causal mask: a sliding window cannot ride the core
  unwindowed["sliding_window"] = 2;
  CHECK(heuristics_config_json(cpu, op().bind(unwindowed))["prefill"] == "staged");
  json bad = heuristics_config_json(cpu, plain);
  bad["prefill"] = "fast";
  CHECK_THROWS_WITH(check_config_json(cpu, plain, bad), Catch::Contains("'core' or 'staged'"));
}
