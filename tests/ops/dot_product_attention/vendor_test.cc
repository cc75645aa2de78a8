// Tests for the oneDNN composite baseline of dot_product_attention against the float64 oracle,
// and the options it declines.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "ops/framework/errors.h"
#include "tests/ops/dot_product_attention/attention_test_util.h"
#include "tests/ops/impl_calls.h"

using namespace tokamax;
using namespace tokamax::attention_testing;
using nlohmann::json;

namespace {

const Implementation& onednn() { return dot_product_attention_op().implementation("onednn"); }

bool available() {
  const Support support = onednn().supported_on(cpu::host_device());
  if (!support.ok) WARN("skipping onednn: " << support.reason);
  return support.ok;
}

}  // namespace

TEST_CASE("dot_product_attention onednn composite matches the oracle", "[attention]") {
  if (!available()) return;
  const std::vector<json> cases = {
      {{"q", "f32[2,37,4,32]"}, {"k", "f32[2,45,4,32]"}, {"v", "f32[2,45,4,32]"}},
      {{"q", "f32[1,50,4,32]"},
       {"k", "f32[1,30,2,32]"},
       {"v", "f32[1,30,2,16]"},
       {"is_causal", true}},
      {{"q", "bf16[1,64,8,32]"},
       {"k", "bf16[1,64,2,32]"},
       {"v", "bf16[1,64,2,32]"},
       {"is_causal", true}},
      {{"q", "bf16[2,33,2,16]"},
       {"k", "bf16[2,47,2,16]"},
       {"v", "bf16[2,47,2,16]"},
       {"logits_scale", 0.5}},
  };
  for (const json& case_args : cases) {
    const BoundArgs args = bind_args(case_args);
    CAPTURE(args.key());
    const TensorMap inputs = dot_product_attention_op().make_inputs(args, 8);
    try {
      check_args(onednn(), args);
    } catch (const NotImplemented& e) {
      WARN("skipping " << args.key() << ": " << e.what());  // e.g. no bf16 matmul on this ISA
      continue;
    }
    const Tensor out = run_impl("onednn", args, inputs);
    const Comparison c = compare_all(args, inputs, out);
    CAPTURE(c.worst_ratio, c.max_abs_error, c.bound);
    CHECK(judge(c) == Disposition::kPassed);
  }
}

TEST_CASE("dot_product_attention onednn declines what the composite cannot express",
          "[attention]") {
  const json base = {{"q", "f32[1,8,2,8]"}, {"k", "f32[1,8,2,8]"}, {"v", "f32[1,8,2,8]"}};
  const std::vector<json> patches = {
      {{"logits_soft_cap", 2.0}},
      {{"local_window", {1, 1}}},
      {{"bias", "f32[8,8]"}},
      {{"mask", "bool[8]"}},
      {{"kv_seq_lengths", {3}}},
      {{"q", "f16[1,8,2,8]"}, {"k", "f16[1,8,2,8]"}, {"v", "f16[1,8,2,8]"}},
  };
  for (const json& patch : patches) {
    json args = base;
    args.update(patch);
    CAPTURE(args.dump());
    CHECK_THROWS_AS(check_args(onednn(), bind_args(args)), NotImplemented);
  }
  CHECK_NOTHROW(check_args(onednn(), bind_args(base)));
}
