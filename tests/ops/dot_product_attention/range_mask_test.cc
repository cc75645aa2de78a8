// Tests of dot_product_attention's upstream Mask ranges and token indices (range_mask.h): the
// key mask against upstream's Mask.as_array formula written out here, its block classes against
// a brute force, the cpu kernel and the reference against the oracle on every kernel layout, the
// oracle failing outputs computed without the ranges, and bind's errors.
#include "ops/dot_product_attention/range_mask.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ops/dot_product_attention/api.h"
#include "ops/framework/numerics.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/dot_product_attention/attention_test_util.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"

using namespace tokamax;
using namespace tokamax::testing;
using namespace tokamax::attention_testing;
using nlohmann::json;

namespace {

const DotProductAttentionOp& op() { return dot_product_attention_op(); }

// Every range form: documents (alike for every head, and per head), key-side ranges with a
// causal offset, token indices under a causal window, all of them with GQA.
std::vector<json> range_cases() {
  const json base = {{"q", "f32[2,37,4,16]"}, {"k", "f32[2,41,2,16]"}, {"v", "f32[2,41,2,8]"}};
  std::vector<json> out;
  json docs = base;
  docs["is_causal"] = true;
  docs["k_start"] = "i32[2,1,37]";
  docs["k_end"] = "i32[2,1,37]";
  out.push_back(docs);
  json per_head = base;
  per_head["k_start"] = "i32[2,4,37]";
  per_head["k_end"] = "i32[4,1]";
  out.push_back(per_head);
  json keys = base;
  keys["mask"] = {{"q_start", "i32[41]"}, {"q_end", "i32[2,4,41]"}, {"offset", 3}};
  out.push_back(keys);
  json indices = base;
  indices["mask"] = {{"offset", -1}, {"window_size", 9}};
  indices["q_indices"] = "i32[2,1,37]";
  indices["k_indices"] = "i32[41]";
  indices["k_start"] = "i32[2,4,37]";
  out.push_back(indices);
  return out;
}

// Upstream's Mask.as_array for one element, from the tensors as generated.
bool upstream_visible(const AttentionProblem& p, const TensorMap& x, int64_t b, int64_t hq,
                      int64_t r, int64_t j) {
  auto at = [&](const char* name, bool row) -> int64_t {
    const TensorSpec& spec = x.at(name).spec();
    // Right-aligned broadcast of [.., H, L] over [B, H, L].
    const int64_t L = spec.dims.back(), heads = spec.rank() >= 2 ? spec.dims[spec.rank() - 2] : 1;
    const int64_t batches = spec.rank() >= 3 ? spec.dims[spec.rank() - 3] : 1;
    const int64_t pos = L == 1 ? 0 : (row ? r : j);
    const int64_t e = ((batches == 1 ? 0 : b) * heads + (heads == 1 ? 0 : hq)) * L + pos;
    return x.at(name).get(e);
  };
  const int64_t qi = x.contains("q_indices") ? at("q_indices", true) : r;
  const int64_t kj = x.contains("k_indices") ? at("k_indices", false) : j;
  if (p.is_causal) {
    if (!(qi >= kj - p.causal_offset)) return false;
    if (p.causal_window >= 0 && !(qi < kj - p.causal_offset + p.causal_window)) return false;
  }
  if (x.contains("q_start") && !(qi >= at("q_start", false))) return false;
  if (x.contains("q_end") && !(qi < at("q_end", false))) return false;
  if (x.contains("k_start") && !(kj >= at("k_start", true))) return false;
  if (x.contains("k_end") && !(kj < at("k_end", true))) return false;
  return true;
}

}  // namespace

TEST_CASE("dot_product_attention range masks follow upstream's Mask.as_array", "[attention]") {
  for (const json& c : range_cases()) {
    const BoundArgs args = bind_args(c);
    const TensorMap inputs = op().make_inputs(args, 5);
    const AttentionProblem p = with_range_mask(AttentionProblem::from(args), inputs);
    REQUIRE(p.key_mask);
    int64_t seen = 0, total = 0;
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t hq = 0; hq < p.H; ++hq) {
        for (int64_t r = 0; r < p.T; ++r) {
          const auto [lo, hi] = p.key_range(b, r);
          for (int64_t j = 0; j < p.t; ++j) {
            CAPTURE(args.key(), b, hq, r, j);
            const bool want = upstream_visible(p, inputs, b, hq, r, j);
            CHECK((j >= lo && j < hi && p.key_visible(b, hq, r, j)) == want);
            seen += want;
            ++total;
          }
        }
      }
    }
    // The generated data masks some entries and keeps others.
    CHECK(seen > total / 50);
    CHECK(seen < total);
    // Blocks: an empty one has no visible entry; an interval one none outside the rows' ranges.
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t r0 = 0; r0 < p.T; r0 += 5) {
        for (int64_t j0 = 0; j0 < p.t; j0 += 7) {
          const int64_t rows = std::min<int64_t>(5, p.T - r0), n = std::min<int64_t>(7, p.t - j0);
          const KeyBlock kind = p.key_block(b, r0, rows, j0, n);
          for (int64_t hq = 0; hq < p.H; ++hq) {
            for (int64_t r = r0; r < r0 + rows; ++r) {
              const auto [lo, hi] = p.key_range(b, r);
              for (int64_t j = j0; j < j0 + n; ++j) {
                const bool want = upstream_visible(p, inputs, b, hq, r, j);
                CAPTURE(args.key(), b, hq, r, j);
                if (kind == KeyBlock::kEmpty) CHECK_FALSE(want);
                if (kind == KeyBlock::kInterval) CHECK(want == (j >= lo && j < hi));
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("cpu dot_product_attention with range masks passes the oracle on every layout",
          "[attention]") {
  const Implementation& cpu = op().implementation("cpu");
  for (json c : range_cases()) {
    for (const char* dtype : {"f32", "bf16"}) {
      if (std::string(dtype) == "bf16") {
        for (const char* name : {"q", "k", "v"}) {
          c[name] = "bf16" + c[name].get<std::string>().substr(3);
        }
      }
      const BoundArgs args = bind_args(c);
      const TensorMap inputs = op().make_inputs(args, 9);
      for (const char* packing : {"shared", "transposed", "per_block"}) {
        for (const bool group : {true, false}) {
          json config = heuristics_config_json(cpu, args);
          config["kv_packing"] = packing;
          config["group_heads"] = group;
          config["bf16_path"] = "convert_f32";
          config["block_q"] = 5;
          config["block_kv"] = 7;
          CAPTURE(args.key(), config.dump());
          CHECK(judge(run_against_oracle(op(), "cpu", args, config, inputs, args, "out")) ==
                Disposition::kPassed);
        }
      }
      CHECK(judge(run_against_oracle(op(), "reference", args, json::object(), inputs, args,
                                     "out")) == Disposition::kPassed);
    }
  }
  // The same problem without its ranges fails the oracle of the one with them.
  for (const json& c : range_cases()) {
    json plain = c;
    for (const char* name : kAttentionRangeNames) plain.erase(name);
    if (plain.contains("mask")) {
      for (const char* name : kAttentionRangeNames) plain["mask"].erase(name);
    }
    const BoundArgs args = bind_args(c), plain_args = bind_args(plain);
    const TensorMap inputs = op().make_inputs(args, 9);
    CAPTURE(args.key());
    CHECK(judge(run_against_oracle(op(), "cpu", plain_args, json::object(), inputs, args, "out")) ==
          Disposition::kFailed);
  }
}

TEST_CASE("dot_product_attention binds range masks and names their errors", "[attention]") {
  const json ok = {{"q", "f32[2,8,4,16]"}, {"k", "f32[2,10,2,16]"}, {"v", "f32[2,10,2,16]"}};
  auto with = [&](const char* key, json value) {
    json args = ok;
    args[key] = std::move(value);
    return args;
  };
  CHECK(bind_error_field(op(), with("k_start", "i32[2,4,8]")) == "<no error>");
  CHECK(bind_error_field(op(), with("q_start", "i32[10]")) == "<no error>");
  CHECK(bind_error_field(op(), with("k_start", "i32[2,4,10]")) == "k_start");  // T, not t
  CHECK(bind_error_field(op(), with("q_end", "i32[8]")) == "q_end");           // t, not T
  CHECK(bind_error_field(op(), with("q_indices", "f32[8]")) == "q_indices");   // dtype
  CHECK(bind_error_field(op(), with("k_indices", "i32[3,2,4,10]")) == "k_indices");
  json twice = with("k_end", "i32[8]");
  twice["mask"] = {{"k_end", "i32[8]"}};
  CHECK(bind_error_field(op(), twice) == "k_end");
  CHECK(bind_error_field(op(), with("mask", {{"k_begin", "i32[8]"}})) == "mask");
  // Inside the mask object with a causal mask, or alone (no causal mask then).
  const BoundArgs both =
      bind_args(with("mask", {{"k_start", "i32[8]"}, {"causal_mask", {{"offset", 1}}}}));
  CHECK(both.option("k_start") == "i32[8]");
  CHECK(both.option("causal_mask").at("offset") == 1);
  const BoundArgs alone = bind_args(with("mask", {{"q_end", "i32[10]"}}));
  CHECK_FALSE(alone.has("causal_mask"));
  CHECK(AttentionProblem::from(alone).has_ranges());
  // Indices move the causal test into the key mask.
  json indexed = with("q_indices", "i32[8]");
  indexed["is_causal"] = true;
  CHECK(AttentionProblem::from(bind_args(indexed)).causal_in_key_mask);
  CHECK_FALSE(AttentionProblem::from(bind_args(with("is_causal", true))).causal_in_key_mask);
}
