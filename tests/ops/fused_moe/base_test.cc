// Tests of fused_moe's binding, the API's gating checks, the router's rules (selection on the
// logits, ties to the lower expert, -inf a masked expert, renormalisation) against hand-computed
// layers, and the oracle's bound (an f32 output 1e-3 off, or a layer without renormalisation,
// fails it).
#include "ops/fused_moe/base.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/fused_moe/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/tensor_values.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

double silu(double v) { return v / (1.0 + std::exp(-v)); }

}  // namespace

TEST_CASE("fused_moe bind names the argument it rejects", "[fused_moe]") {
  const json base = {{"x", "bf16[16,64]"},
                     {"w1", "bf16[4,64,64]"},
                     {"w2", "bf16[4,32,64]"},
                     {"gating", "f32[16,4]"},
                     {"topk", 2}};
  CHECK(bind_error_field(fused_moe_op(), base) == "<no error>");
  auto with = [&](const char* key, json value) {
    json args = base;
    args[key] = std::move(value);
    return args;
  };
  const std::vector<std::pair<json, std::string>> bad = {
      {with("x", "i8[16,64]"), "x"},
      {with("x", "bf16[16]"), "x"},
      {with("w1", "bf16[4,64,63]"), "w1"},  // 2 I odd
      {with("w1", "bf16[4,60,64]"), "w1"},  // H differs from x's
      {with("w1", "f32[4,64,64]"), "w1"},   // not x's dtype
      {with("w1", "bf16[0,64,64]"), "w1"},  // no expert
      {with("w2", "bf16[4,32,60]"), "w2"},
      {with("w2", "bf16[3,32,64]"), "w2"},
      {with("w2", "f16[4,32,64]"), "w2"},
      {with("gating", "f32[15,4]"), "gating"},
      {with("gating", "f32[16,5]"), "gating"},
      {with("gating", "i32[16,4]"), "gating"},
      {with("topk", 0), "topk"},
      {with("topk", 5), "topk"},  // more than E
      {with("topk", 1.5), "topk"},
      {with("renormalize", "yes"), "renormalize"},
      {with("act_fn", "gelu"), "act_fn"},
      {with("act_fn", 3), "act_fn"},
      {with("w1_bias", "f32[4,64]"), "w1_bias"},  // upstream's [E, 1, 2 I]
      {with("w1_bias", "f32[4,1,32]"), "w1_bias"},
      {with("w2_bias", "f32[4,1,32]"), "w2_bias"},
      {with("w1_scale", "f32[4,64]"), "w1_scale"},  // float experts take no scale
      {with("w1", "i8[4,64,64]"), "w2"},            // w2 not of w1's quantized dtype
      {with("top_k", 2), "top_k"},
  };
  for (const auto& [args, field] : bad) {
    CAPTURE(args.dump());
    CHECK(bind_error_field(fused_moe_op(), args) == field);
  }
  json one_expert = with("w1", "bf16[1,64,64]");
  one_expert["w2"] = "bf16[1,32,64]";
  one_expert["gating"] = "f32[16,1]";
  one_expert.erase("topk");  // the default k = 2 exceeds E = 1
  CHECK(bind_error_field(fused_moe_op(), one_expert) == "topk");
  // Quantized experts: both scales, per channel, per block of the contraction, or upstream's
  // [E, 1, 1, cols].
  json quantized = with("w1", "f8e4m3[4,64,64]");
  quantized["w2"] = "f8e4m3[4,32,64]";
  quantized["w1_scale"] = "f32[4,64]";
  quantized["w2_scale"] = "f32[4,4,64]";
  CHECK(bind_error_field(fused_moe_op(), quantized) == "<no error>");
  auto quantized_with = [&](const char* key, json value) {
    json args = quantized;
    if (value.is_null()) {
      args.erase(key);
    } else {
      args[key] = std::move(value);
    }
    return args;
  };
  const std::vector<std::pair<json, std::string>> bad_quantized = {
      {quantized_with("w2_scale", nullptr), "w2_scale"},
      {quantized_with("w1_scale", "f32[4,32]"), "w1_scale"},
      {quantized_with("w1_scale", "f32[4,5,64]"), "w1_scale"},  // 5 blocks do not divide H = 64
      {quantized_with("w1_scale", "f32[4,2,1,64]"), "w1_scale"},
      {quantized_with("w2_scale", "i32[4,64]"), "w2_scale"},
      {quantized_with("w2", "i8[4,32,64]"), "w2"},
      {quantized_with("w2", "bf16[4,32,64]"), "w2"},
  };
  for (const auto& [args, field] : bad_quantized) {
    CAPTURE(args.dump());
    CHECK(bind_error_field(fused_moe_op(), args) == field);
  }
  CHECK(FusedMoeProblem::from(fused_moe_op().bind(quantized)).w2_blocks == 4);
  CHECK(FusedMoeProblem::from(fused_moe_op().bind(quantized_with("w2_scale", "f32[4,1,1,64]")))
            .w2_blocks == 1);

  const BoundArgs bound = fused_moe_op().bind(base);
  CHECK(fused_moe_op().outputs(bound).at(0).spec == TensorSpec{DType::kBF16, {16, 64}});
  CHECK(bound.args["renormalize"] == true);
  CHECK(bound.args["act_fn"] == "silu");
}

TEST_CASE("fused_moe routes on the logits with ties to the lower expert, as hand-computed",
          "[fused_moe]") {
  // H = 2, I = 1, E = 3, k = 2. Expert e: gate = x . a_e, up = x . b_e, out = silu(gate) up c_e.
  const Tensor x = tensor_of<float>({2, 2}, {1.0f, 2.0f, -0.5f, 0.25f});
  // w1[e] = [[a0, b0], [a1, b1]] ([H, 2 I]).
  const Tensor w1 = tensor_of<float>({3, 2, 2}, {0.5f, 1.0f, -1.0f, 0.5f,     // expert 0
                                                 1.0f, -0.5f, 0.25f, 2.0f,    // expert 1
                                                 -0.75f, 1.5f, 1.0f, 1.0f});  // expert 2
  const Tensor w2 = tensor_of<float>({3, 1, 2}, {1.0f, -2.0f, 0.5f, 3.0f, -1.0f, 1.0f});
  // Token 0: experts 1 and 2 tie above expert 0: both taken (k = 2). Token 1: experts 0 and 2
  // tie for second place behind 1: the lower, expert 0, is taken.
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor gating = tensor_of<float>({2, 3}, {0.0f, 1.0f, 1.0f, 0.3f, 2.0f, 0.3f});
  auto expected = [&](int64_t t, int64_t c, bool renormalize) {
    const std::vector<std::vector<int>> chosen = {{1, 2}, {1, 0}};
    double denominator = 0.0;
    for (int e = 0; e < 3; ++e) {
      const bool selected = e == chosen[t][0] || e == chosen[t][1];
      if (!renormalize || selected) denominator += std::exp(gating.get(t * 3 + e));
    }
    double sum = 0.0;
    for (int e : chosen[t]) {
      const double gate = x.get(t * 2) * w1.get(e * 4 + 0) + x.get(t * 2 + 1) * w1.get(e * 4 + 2);
      const double up = x.get(t * 2) * w1.get(e * 4 + 1) + x.get(t * 2 + 1) * w1.get(e * 4 + 3);
      sum += std::exp(gating.get(t * 3 + e)) / denominator * silu(gate) * up * w2.get(e * 2 + c);
    }
    return sum;
  };
  for (const bool renormalize : {true, false}) {
    for (const char* impl : {"reference", "composite", "cpu"}) {
      CAPTURE(impl, renormalize);
      const Tensor out = fused_moe(x, w1, w2, gating,
                                   {.topk = 2, .renormalize = renormalize, .implementation = impl});
      REQUIRE(out.spec() == TensorSpec{DType::kF32, {2, 2}});
      for (int64_t i = 0; i < 4; ++i) {
        CAPTURE(i);
        CHECK(out.get(i) == Approx(expected(i / 2, i % 2, renormalize)).epsilon(1e-5));
      }
    }
  }
  // -inf is a masked expert: never over a finite logit, weight 0 when taken (k = E).
  const Tensor masked = tensor_of<float>({2, 3}, {-inf, 1.0f, 1.0f, 0.3f, 2.0f, -inf});
  const Tensor all = fused_moe(x, w1, w2, masked, {.topk = 3, .implementation = "cpu"});
  const Tensor two = fused_moe(x, w1, w2, masked, {.topk = 2, .implementation = "reference"});
  for (int64_t i = 0; i < 4; ++i) CHECK(all.get(i) == Approx(two.get(i)).epsilon(1e-5));
}

TEST_CASE("fused_moe refuses gating the router cannot order", "[fused_moe]") {
  const Tensor x = tensor_of<float>({2, 2}, {1, 2, 3, 4});
  const Tensor w1 = tensor_of<float>({2, 2, 2}, {1, 0, 0, 1, 1, 1, 1, 1});
  const Tensor w2 = tensor_of<float>({2, 1, 2}, {1, 1, 1, 1});
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<std::vector<float>, std::string>> bad = {
      {{0, nan, 1, 1}, "gating[0, 1]"},
      {{0, 1, inf, 1}, "gating[1, 0]"},
      {{0, 1, -inf, -inf}, "gating row 1"},
  };
  for (const auto& [values, where] : bad) {
    CAPTURE(where);
    try {
      fused_moe(x, w1, w2, tensor_of<float>({2, 2}, values), {.topk = 1});
      FAIL("gating was accepted");
    } catch (const InvalidArgument& e) {
      CHECK(e.field() == "gating");
      CHECK(std::string(e.what()).find(where) != std::string::npos);
    }
  }
}

TEST_CASE(
    "fused_moe's oracle passes the reference and rejects an output 1e-3 off or a wrong "
    "router",
    "[fused_moe]") {
  // bf16 layers may round the activation and each route's output to bf16 (a chain of ops
  // does), so their bound is several bf16 units wide; f32 layers have no such rounding and the
  // bound is the f32 accumulation's alone.
  for (const char* dtype : {"f32", "bf16"}) {
    CAPTURE(dtype);
    const std::string d = dtype;
    const json base = {{"x", d + "[24,64]"},
                       {"w1", d + "[6,64,48]"},
                       {"w2", d + "[6,24,64]"},
                       {"gating", "f32[24,6]"},
                       {"topk", 2},
                       {"act_fn", "swigluoai"},
                       {"w1_bias", d + "[6,1,48]"}};
    const BoundArgs args = fused_moe_op().bind(base);
    const TensorMap inputs = fused_moe_op().make_inputs(args, 5);
    std::vector<int64_t> index(24 * 64);
    for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<int64_t>(i);
    const OracleSample oracle = fused_moe_op().oracle(args, inputs, "out", index);
    const ErrorModel model = fused_moe_op().error_model(args);
    TensorMap outputs = fused_moe_op().allocate_outputs(args);
    run_json(fused_moe_op().implementation("reference"), args, json::object(), inputs, outputs);
    Tensor& out = outputs.at("out");
    CHECK(judge(compare_to_oracle(out, oracle, model)) == Disposition::kPassed);
    if (d == "f32") {
      int64_t largest = 0;  // perturb the largest output: the bound is relative there
      for (int64_t i = 0; i < out.num_elements(); ++i) {
        if (std::fabs(out.get(i)) > std::fabs(out.get(largest))) largest = i;
      }
      const double kept = out.get(largest);
      out.set(largest, kept * (1.0 + 1e-3));
      CHECK(judge(compare_to_oracle(out, oracle, model)) == Disposition::kFailed);
      out.set(largest, kept);
    }
    // The same layer without renormalisation: the weights of every token shrink.
    json plain = base;
    plain["renormalize"] = false;
    const BoundArgs other = fused_moe_op().bind(plain);
    TensorMap wrong = fused_moe_op().allocate_outputs(other);
    run_json(fused_moe_op().implementation("reference"), other, json::object(), inputs, wrong);
    CHECK(judge(compare_to_oracle(wrong.at("out"), oracle, model)) == Disposition::kFailed);
  }
}
