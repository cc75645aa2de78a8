// Tests of ragged_paged_attention's binding (the metadata's values checked, never a wild read),
// the reference against the float64 oracle, and the oracle: the causal mask ignored, a new key
// written to the wrong slot, or an invalid token's output not zero, fail it.
#include "ops/ragged_paged_attention/base.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/ragged_paged_attention/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const RaggedPagedAttentionOp& op() { return ragged_paged_attention_op(); }

// Three sequences, the last inactive: a decode token, a 4-token prefill, 2 padding tokens;
// pages of 4, 3 per sequence, head dim 8 padded to 16, GQA 4:2.
json batch(const std::string& dtype = "f32") {
  return {{"queries", dtype + "[7,4,8]"},
          {"keys", dtype + "[7,2,8]"},
          {"values", dtype + "[7,2,8]"},
          {"kv_cache", dtype + "[12,4,4,16]"},
          {"kv_lens", {6, 9, 3}},
          {"page_indices", {4, 0, 7, 11, 2, 9, 1, 3, 5}},
          {"cu_q_lens", {0, 1, 5, 7}},
          {"distribution", {1, 1, 2}},
          {"sm_scale", 0.35}};
}

json with(json args, const char* key, json value) {
  args[key] = std::move(value);
  return args;
}

Comparison compare(const BoundArgs& args, const TensorMap& inputs, const TensorMap& outputs,
                   const std::string& name) {
  return compare_whole_output(op(), args, inputs, outputs.at(name), name);
}

TensorMap run(const std::string& impl, const BoundArgs& args, const TensorMap& inputs) {
  TensorMap outputs = op().allocate_outputs(args);
  run_json(op().implementation(impl), args,
           impl == "reference" ? json::object()
                               : heuristics_config_json(op().implementation(impl), args),
           inputs, outputs);
  return outputs;
}

}  // namespace

TEST_CASE("ragged_paged_attention bind names the argument it rejects", "[ragged_paged_attention]") {
  const json base = batch();
  CHECK(bind_error_field(op(), base) == "<no error>");
  const std::vector<std::pair<json, std::string>> bad = {
      {with(base, "page_indices", {4, 0, 7, 11, 2, 9, 1, 3, 12}), "page_indices"},  // past pages
      {with(base, "page_indices", {4, 0, 7, 11}), "page_indices"},                  // not S P
      {with(base, "cu_q_lens", {0, 3, 2, 7}), "cu_q_lens"},                         // decreasing
      {with(base, "cu_q_lens", {0, 1, 5}), "cu_q_lens"},                            // not S + 1
      {with(base, "cu_q_lens", {0, 1, 8, 8}), "cu_q_lens"},                         // past Tq
      {with(base, "kv_lens", {6, 3, 3}), "kv_lens"},   // fewer than the 4 new tokens
      {with(base, "kv_lens", {6, 13, 3}), "kv_lens"},  // more than 3 pages of 4 hold
      {with(base, "distribution", {2, 1, 2}), "distribution"},
      {with(base, "distribution", {0, 0, 4}), "distribution"},
      {with(base, "keys", "bf16[7,2,8]"), "keys"},
      {with(base, "keys", "f32[7,3,8]"), "keys"},
      {with(base, "kv_cache", "f32[12,4,4,7]"), "kv_cache"},
      {with(base, "sliding_window", 0), "sliding_window"},
      {with(base, "k_scale", 0.0), "k_scale"},
      {with(base, "soft_cap", -1.0), "soft_cap"},
      {with(base, "out_dtype", "i8"), "out_dtype"},
      {with(base, "kv_lens", "6"), "kv_lens"},
      {with(base, "block_sizes", 3), "block_sizes"},
  };
  for (const auto& [args, field] : bad) {
    CAPTURE(args.dump());
    CHECK(bind_error_field(op(), args) == field);
  }
  const BoundArgs bound = op().bind(with(base, "return_lse", true));
  const std::vector<TensorDecl> outputs = op().outputs(bound);
  REQUIRE(outputs.size() == 3);
  CHECK(outputs[0].spec == TensorSpec{DType::kF32, {7, 4, 8}});
  CHECK(outputs[1].name == "updated_kv_cache");
  CHECK(outputs[2].spec == TensorSpec{DType::kF32, {7, 4}});
  CHECK(op().outputs(op().bind(with(base, "skip_kv_update", true))).size() == 1);
}

TEST_CASE("ragged_paged_attention tokens: sequences, positions, key ranges",
          "[ragged_paged_attention]") {
  const RaggedPagedAttentionProblem p =
      RaggedPagedAttentionProblem::from(op().bind(with(batch(), "sliding_window", 3)));
  const RpaTokens tokens(p);
  CHECK(tokens.seq == std::vector<int64_t>{0, 1, 1, 1, 1, -1, -1});
  CHECK(tokens.pos == std::vector<int64_t>{5, 5, 6, 7, 8, 0, 0});
  CHECK(RpaTokens::key_range(p, 1, 6) == std::pair<int64_t, int64_t>{4, 7});
  // Key 5 of sequence 1 is row 1 of its second page (page_indices[3 + 1] = 2).
  CHECK(rpa_cache_at(p, 1, 5, 1, 1) == ((2 * 4 + 1) * 4 + 3) * 16);
}

TEST_CASE("ragged_paged_attention reference passes the oracle, which rejects what is wrong",
          "[ragged_paged_attention]") {
  for (const char* dtype : {"f32", "bf16"}) {
    CAPTURE(dtype);
    const BoundArgs args = op().bind(with(batch(dtype), "return_lse", true));
    const TensorMap inputs = op().make_inputs(args, 4);
    TensorMap outputs = run("reference", args, inputs);
    for (const char* name : {"out", "updated_kv_cache", "lse"}) {
      CAPTURE(name);
      CHECK(judge(compare(args, inputs, outputs, name)) == Disposition::kPassed);
    }
    // Without the causal mask the prefill tokens see keys past themselves.
    const TensorMap acausal = run(
        "reference",
        op().bind(with(with(batch(dtype), "return_lse", true), "use_causal_mask", false)), inputs);
    CHECK(judge(compare(args, inputs, acausal, "out")) == Disposition::kFailed);
    // Without the update the new tokens' own keys are the cache's old ones.
    const TensorMap stale = run(
        "reference",
        op().bind(with(with(batch(dtype), "return_lse", true), "skip_kv_update", true)), inputs);
    CHECK(judge(compare(args, inputs, stale, "out")) == Disposition::kFailed);
    // One cache element of a new row, and one output element of a padding token, changed.
    Tensor& cache = outputs.at("updated_kv_cache");
    const RaggedPagedAttentionProblem p = RaggedPagedAttentionProblem::from(args);
    const int64_t at = rpa_cache_at(p, 1, 7, 0, 1) + 3;
    const double kept = cache.get(at);
    cache.set(at, kept + 1.0);
    CHECK(judge(compare(args, inputs, outputs, "updated_kv_cache")) == Disposition::kFailed);
    cache.set(at, kept);
    outputs.at("out").set(6 * 4 * 8 + 5, 0.5);
    CHECK(judge(compare(args, inputs, outputs, "out")) == Disposition::kFailed);
  }
}
