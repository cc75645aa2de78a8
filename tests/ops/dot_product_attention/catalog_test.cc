// Tests for specs/dot_product_attention.yaml: sizes of the verified cases and option coverage.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>

#include "cli/toolkit/catalog/arg_spec.h"
#include "ops/dot_product_attention/api.h"

using namespace tokamax;

namespace {

bool has_tag(const ArgSpec& spec, const std::string& tag) {
  return std::find(spec.tags.begin(), spec.tags.end(), tag) != spec.tags.end();
}

}  // namespace

TEST_CASE("dot_product_attention catalog: small ci_tests covering every option", "[attention]") {
  const DotProductAttentionOp& op = dot_product_attention_op();
  int primary = 0;
  double smoke_flops = 0.0;
  std::set<std::string> smoke_dtypes, covered;
  std::set<int64_t> gqa_ratios;
  for (const ArgSpec& spec : builtin_specs()) {
    if (spec.op != "dot_product_attention") continue;
    INFO(spec.name);
    if (has_tag(spec, "primary")) ++primary;
    const AttentionProblem p = AttentionProblem::from(spec.args);
    if (has_tag(spec, "smoke")) {
      CHECK(has_tag(spec, "ci_tests"));
      smoke_dtypes.insert(std::string(dtype_name(p.dtype)));
      smoke_flops += op.flops(spec.args);
    }
    if (!has_tag(spec, "ci_tests")) continue;
    CHECK(op.flops(spec.args) < 50e6);
    gqa_ratios.insert(p.groups());
    covered.insert(std::string(dtype_name(p.dtype)));
    if (p.is_causal) covered.insert("causal");
    if (!p.is_causal) covered.insert("not causal");
    if (p.T != p.t) covered.insert("T != t");
    if (p.d != p.D) covered.insert("d != D");
    if (p.logits_soft_cap > 0) covered.insert("soft cap");
    if (p.has_local_window()) covered.insert("local window");
    if (p.bias) covered.insert("bias");
    if (p.mask) covered.insert("mask");
    if (!p.q_seq_lengths.empty()) covered.insert("q lengths");
    for (int64_t b = 0; b < static_cast<int64_t>(p.kv_seq_lengths.size()); ++b) {
      if (p.kv_seq_lengths[b] == 0) covered.insert("fully masked rows");
    }
    if (p.T % 16 != 0 && p.t % 16 != 0) covered.insert("odd lengths");
  }
  // mixtral, deepseek2, two alphafold shapes and the 6 x 3 x 2 x 2 FlashAttention-3 sweep.
  CHECK(primary == 4 + 72);
  CHECK(smoke_flops < 1e8);
  CHECK(smoke_dtypes == std::set<std::string>{"f32", "bf16", "f16"});
  CHECK(gqa_ratios.count(1) == 1);
  CHECK(gqa_ratios.count(4) == 1);
  CHECK(gqa_ratios.count(8) == 1);
  for (const char* option :
       {"f32", "bf16", "f16", "causal", "not causal", "T != t", "d != D", "soft cap",
        "local window", "bias", "mask", "q lengths", "fully masked rows", "odd lengths"}) {
    INFO(option);
    CHECK(covered.count(option) == 1);
  }
}
