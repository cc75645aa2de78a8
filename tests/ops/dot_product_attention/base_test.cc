// Tests for dot_product_attention's spec: binding and its errors, the masks, the reference
// against the float64 oracle, and that the error model rejects wrong outputs.
#include "ops/dot_product_attention/base.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/framework/op_lookup.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/dot_product_attention/attention_test_util.h"

using namespace tokamax;
using namespace tokamax::attention_testing;
using nlohmann::json;
using testing::bind_error_field;

namespace {

const json kBase = {{"q", "f32[2,8,4,16]"}, {"k", "f32[2,10,2,16]"}, {"v", "f32[2,10,2,8]"}};

// Small cases covering every option (reference vs oracle runs all of them at every element).
std::vector<json> option_cases() {
  return {
      kBase,
      {{"q", "bf16[1,20,4,16]"},
       {"k", "bf16[1,20,1,16]"},
       {"v", "bf16[1,20,1,16]"},
       {"is_causal", true}},
      {{"q", "f16[2,9,2,8]"},
       {"k", "f16[2,13,2,8]"},
       {"v", "f16[2,13,2,8]"},
       {"q_seq_lengths", {9, 4}},
       {"kv_seq_lengths", {0, 6}}},
      {{"q", "f32[1,24,2,16]"},
       {"k", "f32[1,24,2,16]"},
       {"v", "f32[1,24,2,16]"},
       {"logits_scale", 1.0},
       {"logits_soft_cap", 4.0},
       {"local_window", {5, 2}}},
      {{"q", "bf16[3,12,2,8]"},
       {"k", "bf16[3,15,2,8]"},
       {"v", "bf16[3,15,2,8]"},
       {"bias", "bf16[2,12,15]"},
       {"mask", "bool[3,1,1,15]"}},
      {{"q", "f64[1,10,2,8]"},
       {"k", "f64[1,10,2,8]"},
       {"v", "f64[1,10,2,8]"},
       {"is_causal", true},
       {"bias", "f32[10,10]"}},
      {{"q", "f32[2,14,2,8]"},
       {"k", "f32[2,11,2,8]"},
       {"v", "f32[2,11,2,8]"},
       {"mask", {{"offset", -3}, {"window_size", 4}}}},  // rows 0-2 see nothing
      {{"q", "f32[1,12,2,8]"},
       {"k", "f32[1,12,2,8]"},
       {"v", "f32[1,12,2,8]"},
       {"is_causal", true},
       {"normalize_output", false}},
      {{"q", "f32[2,9,2,8]"},
       {"k", "f32[2,11,2,8]"},
       {"v", "f32[2,11,2,8]"},
       {"dropout_mask", "bool[2,1,9,11]"},
       {"dropout_rate", 0.5}},
  };
}

}  // namespace

TEST_CASE("dot_product_attention bind errors name the offending argument", "[attention]") {
  CHECK(bind_error_field(dot_product_attention_op(), kBase) == "<no error>");
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"k", "f32[2,10,2,12]"}}, "k"},                          // D mismatch
      {{{"k", "f32[2,10,3,16]"}, {"v", "f32[2,10,3,8]"}}, "k"},  // H not a multiple of h
      {{{"k", "bf16[2,10,2,16]"}}, "k"},                         // dtype mismatch
      {{{"k", "f32[3,10,2,16]"}}, "k"},                          // batch mismatch
      {{{"v", "f32[2,11,2,8]"}}, "v"},                           // t mismatch
      {{{"q", "f32[8,16]"}}, "q"},                               // rank
      {{{"q", "i32[2,8,4,16]"}}, "q"},                           // not float
      {{{"bias", "f32[3,8,10]"}}, "bias"},                       // H broadcast
      {{{"bias", "f32[1,2,4,8,10]"}}, "bias"},                   // too many dims
      {{{"mask", "f32[8,10]"}}, "mask"},                         // not bool
      {{{"mask", "bool[2,4,9,10]"}}, "mask"},                    // T mismatch
      {{{"q_seq_lengths", {8}}}, "q_seq_lengths"},
      {{{"q_seq_lengths", {9, 1}}}, "q_seq_lengths"},
      {{{"kv_seq_lengths", {-1, 1}}}, "kv_seq_lengths"},
      {{{"local_window", {3}}}, "local_window"},
      {{{"local_window", {-1, 2}}}, "local_window"},
      {{{"logits_soft_cap", 0.0}}, "logits_soft_cap"},
      {{{"logits_scale", "big"}}, "logits_scale"},
      {{{"is_causal", 1}}, "is_causal"},
      {{{"window", {1, 1}}}, "window"},
  };
  for (const auto& [patch, field] : cases) {
    json args = kBase;
    args.update(patch);
    CAPTURE(args.dump());
    CHECK(bind_error_field(dot_product_attention_op(), args) == field);
  }
  json missing = kBase;
  missing.erase("v");
  CHECK(bind_error_field(dot_product_attention_op(), missing) == "v");
}

TEST_CASE("dot_product_attention bind fills defaults canonically", "[attention]") {
  const BoundArgs args = bind_args(kBase);
  CHECK(args.option("logits_scale").get<double>() == Approx(0.25));
  CHECK(args.option("is_causal") == false);
  CHECK(args.option("bias").is_null());
  CHECK(args.option("local_window").is_null());
  const AttentionProblem p = AttentionProblem::from(args);
  CHECK(p.B == 2);
  CHECK(p.groups() == 2);
  CHECK(p.d == 8);
  CHECK(dot_product_attention_op().outputs(args)[0].spec.to_string() == "f32[2,8,4,8]");
  // Standard FLOP count: 2 * B * H * T * t * (D + d), halved under is_causal.
  CHECK(dot_product_attention_op().flops(args) == 2.0 * 2 * 4 * 8 * 10 * (16 + 8));
  json causal = kBase;
  causal["is_causal"] = true;
  CHECK(dot_product_attention_op().flops(bind_args(causal)) == 2.0 * 4 * 8 * 10 * (16 + 8));
  // A local window counts its visible entries: rows r of T = 8 see keys [r - 2, r] of t = 10.
  json window = kBase;
  window["local_window"] = {2, 0};
  CHECK(dot_product_attention_op().flops(bind_args(window)) ==
        2.0 * 2 * 4 * (1 + 2 + 3 * 6) * (16 + 8));
}

TEST_CASE("dot_product_attention accepts upstream's public-API spellings", "[attention]") {
  json ours = kBase;
  ours.update({{"logits_scale", 0.5},
               {"q_seq_lengths", {8, 3}},
               {"kv_seq_lengths", {10, 4}},
               {"local_window", {2, 2}}});
  json upstream = kBase;
  upstream.update({{"scale", 0.5},
                   {"query_seq_lengths", {8, 3}},
                   {"key_value_seq_lengths", {10, 4}},
                   {"local_window_size", 2}});  // one int w: the window (w, w)
  CHECK(bind_args(upstream).key() == bind_args(ours).key());
  json pair = kBase;
  pair["local_window_size"] = {3, 0};
  CHECK(bind_args(pair).option("local_window") == json({3, 0}));
  // Both spellings at once: the alias is named.
  json both = kBase;
  both.update({{"scale", 0.5}, {"logits_scale", 0.5}});
  CHECK(bind_error_field(dot_product_attention_op(), both) == "scale");
  // A bad value under the alias still gets the argument's own check.
  json bad = kBase;
  bad["local_window_size"] = -1;
  CHECK(bind_error_field(dot_product_attention_op(), bad) == "local_window");
}

TEST_CASE("dot_product_attention key ranges: causal top-left, windows, lengths", "[attention]") {
  json args = kBase;
  args["is_causal"] = true;
  args["local_window"] = {2, 1};
  args["q_seq_lengths"] = {8, 3};
  args["kv_seq_lengths"] = {10, 4};
  const AttentionProblem p = AttentionProblem::from(bind_args(args));
  // Causal with T = 8 < t = 10 aligns top-left: row r sees keys <= r (the window's right
  // reach is cut by causal), and at most `left` keys back.
  CHECK(p.key_range(0, 0) == std::pair<int64_t, int64_t>{0, 1});
  CHECK(p.key_range(0, 5) == std::pair<int64_t, int64_t>{3, 6});
  // Batch 1: kv length 4 cuts row 2's keys... and rows >= 3 are past q_seq_lengths.
  CHECK(p.key_range(1, 2) == std::pair<int64_t, int64_t>{0, 3});
  CHECK(p.key_range(1, 3).first >= p.key_range(1, 3).second);
  args.erase("is_causal");
  const AttentionProblem windowed = AttentionProblem::from(bind_args(args));
  CHECK(windowed.key_range(0, 5) == std::pair<int64_t, int64_t>{3, 7});
  CHECK(windowed.key_range(1, 2) == std::pair<int64_t, int64_t>{0, 4});
  // Bottom-right causal alignment (documented): local_window [t, t - T] without is_causal lets
  // row r see keys 0..r + t - T.
  const AttentionProblem bottom_right =
      AttentionProblem::from(bind_args({{"q", "f32[1,8,1,4]"},
                                        {"k", "f32[1,10,1,4]"},
                                        {"v", "f32[1,10,1,4]"},
                                        {"local_window", {10, 2}}}));
  CHECK(bottom_right.key_range(0, 0) == std::pair<int64_t, int64_t>{0, 3});
  CHECK(bottom_right.key_range(0, 7) == std::pair<int64_t, int64_t>{0, 10});
}

TEST_CASE("dot_product_attention reference at f64 is the oracle", "[attention]") {
  for (const json& case_args : option_cases()) {
    const BoundArgs args = bind_args(case_args);
    CAPTURE(args.key());
    const AttentionProblem p = AttentionProblem::from(args);
    const TensorMap inputs = dot_product_attention_op().make_inputs(args, 3);
    auto find = [&](const char* name) -> const Tensor* {
      auto it = inputs.find(name);
      return it == inputs.end() ? nullptr : &it->second;
    };
    // The reference writes in the inputs' dtype; run it at Acc = double into that dtype.
    Tensor typed(dot_product_attention_op().outputs(args)[0].spec);
    dot_product_attention_reference<double>(p, inputs.at("q"), inputs.at("k"), inputs.at("v"),
                                            find("bias"), find("mask"), typed, nullptr,
                                            find("dropout_mask"));
    const OracleSample oracle =
        dot_product_attention_op().oracle(args, inputs, "out", all_indices(args));
    const double u_out = unit_roundoff(p.dtype);
    for (size_t s = 0; s < oracle.index.size(); ++s) {
      const double expected = oracle.value[s];
      CAPTURE(s, expected);
      REQUIRE(std::fabs(typed.get(oracle.index[s]) - expected) <=
              u_out * std::fabs(expected) + 1e-12 * (1 + std::fabs(expected)));
    }
  }
}

TEST_CASE("dot_product_attention reference (f32 softmax) passes the oracle's bound",
          "[attention]") {
  for (const json& case_args : option_cases()) {
    const BoundArgs args = bind_args(case_args);
    CAPTURE(args.key());
    const TensorMap inputs = dot_product_attention_op().make_inputs(args, 5);
    const Tensor out = run_impl("reference", args, inputs);
    const Comparison c = compare_all(args, inputs, out);
    CAPTURE(c.worst_ratio, c.max_abs_error, c.bound);
    CHECK(judge(c) == Disposition::kPassed);
  }
}

TEST_CASE("dot_product_attention fully masked rows are zeros, not NaN", "[attention]") {
  const BoundArgs args = bind_args({{"q", "f32[2,6,2,4]"},
                                    {"k", "f32[2,5,2,4]"},
                                    {"v", "f32[2,5,2,4]"},
                                    {"kv_seq_lengths", {5, 0}},
                                    {"q_seq_lengths", {4, 6}}});
  const TensorMap inputs = dot_product_attention_op().make_inputs(args, 1);
  const Tensor out = run_impl("reference", args, inputs);
  const AttentionProblem p = AttentionProblem::from(args);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t r = 0; r < 6; ++r) {
      const bool empty = b == 1 || r >= 4;
      for (int64_t e = 0; e < p.H * p.d; ++e) {
        const double x = out.get((b * 6 + r) * p.H * p.d + e);
        CHECK(std::isfinite(x));
        if (empty) CHECK(x == 0.0);
      }
    }
  }
}

TEST_CASE("dot_product_attention GQA equals MHA with kv heads repeated", "[attention]") {
  const BoundArgs gqa =
      bind_args({{"q", "f32[1,7,4,8]"}, {"k", "f32[1,9,2,8]"}, {"v", "f32[1,9,2,8]"}});
  const BoundArgs mha =
      bind_args({{"q", "f32[1,7,4,8]"}, {"k", "f32[1,9,4,8]"}, {"v", "f32[1,9,4,8]"}});
  TensorMap inputs = dot_product_attention_op().make_inputs(gqa, 2);
  TensorMap repeated;
  repeated.emplace("q", inputs.at("q"));
  for (const char* name : {"k", "v"}) {
    Tensor x(mha.tensor(name));
    const Tensor& src = inputs.at(name);
    for (int64_t j = 0; j < 9; ++j) {
      for (int64_t hq = 0; hq < 4; ++hq) {
        for (int64_t c = 0; c < 8; ++c)
          x.set((j * 4 + hq) * 8 + c, src.get((j * 2 + hq / 2) * 8 + c));
      }
    }
    repeated.emplace(name, x);
  }
  const Tensor a = run_impl("reference", gqa, inputs);
  const Tensor b = run_impl("reference", mha, repeated);
  for (int64_t e = 0; e < a.num_elements(); ++e) CHECK(a.get(e) == b.get(e));
}

TEST_CASE("dot_product_attention reference residuals: row max and denominator", "[attention]") {
  const BoundArgs args = bind_args({{"q", "f32[1,5,1,4]"},
                                    {"k", "f32[1,6,1,4]"},
                                    {"v", "f32[1,6,1,4]"},
                                    {"is_causal", true},
                                    {"q_seq_lengths", {4}}});
  const AttentionProblem p = AttentionProblem::from(args);
  const TensorMap inputs = dot_product_attention_op().make_inputs(args, 4);
  Tensor out(dot_product_attention_op().outputs(args)[0].spec);
  AttentionResiduals residuals;
  dot_product_attention_reference<double>(p, inputs.at("q"), inputs.at("k"), inputs.at("v"),
                                          nullptr, nullptr, out, &residuals);
  REQUIRE(residuals.row_max.size() == 5);
  // Row 0 sees key 0 only: its max is that logit and the denominator exp(0) = 1.
  double dot = 0;
  for (int64_t x = 0; x < 4; ++x) dot += inputs.at("q").get(x) * inputs.at("k").get(x);
  CHECK(residuals.row_max[0] == Approx(dot * 0.5));
  CHECK(residuals.row_sum[0] == Approx(1.0));
  CHECK(residuals.row_sum[3] >= 1.0f);
  // Row 4 is past q_seq_lengths: no keys.
  CHECK(residuals.row_max[4] == -std::numeric_limits<float>::infinity());
  CHECK(residuals.row_sum[4] == 0.0f);
}

TEST_CASE("dot_product_attention error model rejects perturbed and wrong outputs", "[attention]") {
  for (const char* dtype : {"f32", "bf16"}) {
    const std::string d(dtype);
    const BoundArgs args = bind_args({{"q", d + "[1,40,2,32]"},
                                      {"k", d + "[1,50,2,32]"},
                                      {"v", d + "[1,50,2,32]"},
                                      {"is_causal", true}});
    CAPTURE(d);
    const TensorMap inputs = dot_product_attention_op().make_inputs(args, 9);
    const Tensor good = run_impl("reference", args, inputs);
    REQUIRE(judge(compare_all(args, inputs, good)) == Disposition::kPassed);

    // One element off by a little more than the bound there fails.
    const DotProductAttentionOp& op = dot_product_attention_op();
    const std::vector<int64_t> index = {777};
    const OracleSample at = op.oracle(args, inputs, "out", index);
    const double bound = error_bound(op.error_model(args), at.value[0], at.magnitude[0]);
    Tensor perturbed(good.spec());
    for (int64_t e = 0; e < good.num_elements(); ++e) perturbed.set(e, good.get(e));
    perturbed.set(777, at.value[0] + 2.5 * bound);
    CHECK(judge(compare_all(args, inputs, perturbed)) == Disposition::kFailed);

    // A plausible kernel bug, the logits scaled by 1.02 (a wrong scale), fails.
    json wrong_json = args.args;
    wrong_json["logits_scale"] = args.option("logits_scale").get<double>() * 1.02;
    const Tensor wrong = run_impl("reference", bind_args(wrong_json), inputs);
    CHECK(judge(compare_all(args, inputs, wrong)) == Disposition::kFailed);

    // Off-by-one causal alignment (row r sees r + 1 keys too many) fails.
    json shifted = args.args;
    shifted["is_causal"] = false;
    shifted["local_window"] = {100, 1};
    const Tensor off_by_one = run_impl("reference", bind_args(shifted), inputs);
    CHECK(judge(compare_all(args, inputs, off_by_one)) == Disposition::kFailed);
  }
}

TEST_CASE(
    "dot_product_attention accepts upstream's precision where it keeps the operands and "
    "refuses a rounding preset by name",
    "[attention][precision]") {
  const json base = {{"q", "f32[1,16,2,32]"}, {"k", "f32[1,16,2,32]"}, {"v", "f32[1,16,2,32]"}};
  const std::string plain_key = dot_product_attention_op().bind(base).key();
  for (const json& precision : {json("highest"), json("DEFAULT"), json({"high", "f32_f32_f32"})}) {
    json args = base;
    args["precision"] = precision;
    // Nothing changes: the same canonical arguments and cache key.
    CHECK(dot_product_attention_op().bind(args).key() == plain_key);
  }
  json bf16 = {{"q", "bf16[1,16,2,32]"},
               {"k", "bf16[1,16,2,32]"},
               {"v", "bf16[1,16,2,32]"},
               {"precision", "bf16_bf16_f32_x3"}};
  CHECK_NOTHROW(dot_product_attention_op().bind(bf16));  // bf16 operands: nothing to round
  for (const json& precision : {json("bf16_bf16_f32"), json({"highest", "tf32_tf32_f32"}),
                                json("x3"), json(3), json({"highest"})}) {
    CAPTURE(precision.dump());
    json args = base;
    args["precision"] = precision;
    try {
      dot_product_attention_op().bind(args);
      FAIL("no error");
    } catch (const InvalidArgument& e) {
      CHECK(e.field() == "precision");
    }
  }
}

TEST_CASE("dot_product_attention's causal mask object is upstream's CausalMask", "[attention]") {
  // Key ranges: j <= r + offset and, with a window, j > r + offset - window_size; is_causal
  // ANDs in as CausalMask() (the smaller offset, the window's lower bound kept).
  auto range = [](json mask, bool is_causal, int64_t r) {
    json args = kBase;
    args["mask"] = std::move(mask);
    args["is_causal"] = is_causal;
    return AttentionProblem::from(bind_args(args)).key_range(0, r);
  };
  using Range = std::pair<int64_t, int64_t>;
  CHECK(range({{"offset", 2}}, false, 3) == Range{0, 6});
  CHECK(range({{"offset", -2}}, false, 1).first >= range({{"offset", -2}}, false, 1).second);
  CHECK(range({{"offset", -2}}, false, 4) == Range{0, 3});
  CHECK(range({{"offset", 1}, {"window_size", 3}}, false, 5) == Range{4, 7});
  CHECK(range({{"causal_mask", {{"offset", 1}, {"window_size", 3}}}}, false, 5) == Range{4, 7});
  CHECK(range({{"offset", 1}, {"window_size", 3}}, true, 5) == Range{4, 6});  // offset 0, window 2
  CHECK(range({{"offset", 9}}, false, 7) == Range{0, 10});                    // cut by t
  CHECK(range({{"offset", -20}, {"window_size", 2}}, false, 7).first <= 10);
  // The canonical form binds back to itself.
  json args = kBase;
  args["mask"] = {{"offset", -1}, {"window_size", 5}};
  const BoundArgs bound = bind_args(args);
  CHECK(bound.args["causal_mask"] == json{{"offset", -1}, {"window_size", 5}});
  CHECK(bind_args(bound.args).args == bound.args);
  // Errors name mask (or causal_mask).
  for (const json& bad :
       {json{{"offset", 1.5}}, json{{"window_size", 0}}, json{{"q_begin", 1}},
        json{{"causal_mask", {{"offset", 1}}}, {"offset", 1}}, json{{"causal_mask", 3}}}) {
    json wrong = kBase;
    wrong["mask"] = bad;
    CAPTURE(bad.dump());
    CHECK(bind_error_field(dot_product_attention_op(), wrong) == "mask");
  }
  json range_arg = kBase;
  range_arg["mask"] = {{"q_start", 1}};  // a range that is not a tensor spec names itself
  CHECK(bind_error_field(dot_product_attention_op(), range_arg) == "q_start");
  json twice = args;
  twice["causal_mask"] = {{"offset", 0}, {"window_size", nullptr}};
  CHECK(bind_error_field(dot_product_attention_op(), twice) == "causal_mask");
}

TEST_CASE("a causal mask object gives the output of the same mask as a bool tensor",
          "[attention]") {
  // Upstream's definition built element by element into a bool mask [T, t]: the reference and
  // the cpu kernel (which skips blocks by key range) agree with the tensor form, so key_range
  // cannot share a mistake with the oracle unseen.
  for (const auto& [offset, window] :
       {std::pair<int64_t, int64_t>{-3, 0}, {2, 5}, {0, 1}, {7, 0}}) {
    CAPTURE(offset, window);
    json object = {{"q", "f32[1,33,2,16]"}, {"k", "f32[1,29,1,16]"}, {"v", "f32[1,29,1,16]"}};
    object["mask"] = {{"offset", offset}};
    if (window > 0) object["mask"]["window_size"] = window;
    json tensor = object;
    tensor["mask"] = "bool[33,29]";
    const BoundArgs a = bind_args(object), b = bind_args(tensor);
    TensorMap inputs = dot_product_attention_op().make_inputs(a, 4);
    Tensor mask(b.tensor("mask"));
    for (int64_t r = 0; r < 33; ++r) {
      for (int64_t j = 0; j < 29; ++j) {
        mask.data<bool>()[r * 29 + j] = j <= r + offset && (window == 0 || j > r + offset - window);
      }
    }
    TensorMap with_tensor = inputs;
    with_tensor.emplace("mask", mask);
    for (const char* impl : {"reference", "cpu"}) {
      CAPTURE(impl);
      const Tensor x = run_impl(impl, a, inputs);
      const Tensor y = run_impl(impl, b, with_tensor);
      // The reference walks the same keys either way: the same bits. The cpu kernel skips
      // blocks outside the range but walks masked elements of the tensor form, so its online
      // softmax rescales at other points: a few f32 units apart.
      const double tolerance = std::string(impl) == "reference" ? 0.0 : 1e-6;
      double worst = 0.0, largest = 0.0;
      for (int64_t e = 0; e < x.num_elements(); ++e) {
        worst = std::max(worst, std::fabs(x.get(e) - y.get(e)));
        largest = std::max(largest, std::fabs(y.get(e)));
      }
      CHECK(worst <= tolerance * largest);
    }
  }
}

TEST_CASE("dot_product_attention normalize_output false: the numerator, checked by its own bound",
          "[attention]") {
  // The normalized output is a different function (off by each row's denominator, >= 1): it
  // fails the unnormalized oracle, and the reverse; the gradient refuses the form by name.
  json args = {{"q", "f32[1,16,2,8]"}, {"k", "f32[1,16,2,8]"}, {"v", "f32[1,16,2,8]"}};
  const BoundArgs normalized = bind_args(args);
  args["normalize_output"] = false;
  const BoundArgs raw = bind_args(args);
  CHECK(raw.args["normalize_output"] == false);
  CHECK_FALSE(normalized.args.contains("normalize_output"));
  const TensorMap inputs = dot_product_attention_op().make_inputs(raw, 6);
  const Tensor a = run_impl("reference", raw, inputs);
  const Tensor b = run_impl("reference", normalized, inputs);
  std::vector<int64_t> index(static_cast<size_t>(a.num_elements()));
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<int64_t>(i);
  auto judged = [&](const Tensor& out, const BoundArgs& bound) {
    return judge(compare_to_oracle(out,
                                   dot_product_attention_op().oracle(bound, inputs, "out", index),
                                   dot_product_attention_op().error_model(bound)));
  };
  CHECK(judged(a, raw) == Disposition::kPassed);
  CHECK(judged(b, raw) == Disposition::kFailed);
  CHECK(judged(a, normalized) == Disposition::kFailed);
  json vjp = args;
  vjp["dout"] = "f32[1,16,2,8]";
  CHECK(bind_error_field(find_op("dot_product_attention_vjp"), vjp) == "normalize_output");
}

TEST_CASE("dot_product_attention dropout: weights times keep / (1 - rate) after the softmax",
          "[attention]") {
  json args = {{"q", "f32[1,12,2,8]"},
               {"k", "f32[1,12,2,8]"},
               {"v", "f32[1,12,2,8]"},
               {"dropout_mask", "bool[12,12]"},
               {"dropout_rate", 0.25}};
  const BoundArgs bound = bind_args(args);
  CHECK(bound.args["dropout_rate"] == 0.25);
  const TensorMap inputs = dot_product_attention_op().make_inputs(bound, 8);
  // Every key kept: the plain attention divided by 1 - rate (to a few f32 units: the factor is
  // applied to each weight, not to the sum).
  TensorMap all_kept = inputs;
  Tensor keep(bound.tensor("dropout_mask"));
  for (int64_t e = 0; e < keep.num_elements(); ++e) keep.data<bool>()[e] = true;
  all_kept.at("dropout_mask") = keep;
  json plain_args = args;
  plain_args.erase("dropout_mask");
  plain_args.erase("dropout_rate");
  const Tensor dropped = run_impl("reference", bound, all_kept);
  const Tensor plain = run_impl("reference", bind_args(plain_args), inputs);
  double worst = 0.0, largest = 0.0;
  for (int64_t e = 0; e < plain.num_elements(); ++e) {
    worst = std::max(worst, std::fabs(dropped.get(e) - plain.get(e) / 0.75));
    largest = std::max(largest, std::fabs(plain.get(e) / 0.75));
  }
  CHECK(worst <= 1e-6 * largest);
  // The drawn mask drops some: ignoring it fails the oracle.
  std::vector<int64_t> index(static_cast<size_t>(plain.num_elements()));
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<int64_t>(i);
  const OracleSample oracle = dot_product_attention_op().oracle(bound, inputs, "out", index);
  CHECK(judge(compare_to_oracle(run_impl("reference", bound, inputs), oracle,
                                dot_product_attention_op().error_model(bound))) ==
        Disposition::kPassed);
  CHECK(judge(compare_to_oracle(dropped, oracle, dot_product_attention_op().error_model(bound))) ==
        Disposition::kFailed);
  // Errors: a rate without a mask, a rate outside [0, 1), a float mask; the gradient refuses it.
  json no_mask = plain_args;
  no_mask["dropout_rate"] = 0.1;
  CHECK(bind_error_field(dot_product_attention_op(), no_mask) == "dropout_rate");
  json high = args;
  high["dropout_rate"] = 1.0;
  CHECK(bind_error_field(dot_product_attention_op(), high) == "dropout_rate");
  json floating = args;
  floating["dropout_mask"] = "f32[12,12]";
  CHECK(bind_error_field(dot_product_attention_op(), floating) == "dropout_mask");
  json vjp = args;
  vjp["dout"] = "f32[1,12,2,8]";
  CHECK(bind_error_field(find_op("dot_product_attention_vjp"), vjp) == "dropout_mask");
}

TEST_CASE("dot_product_attention logits_dtype: the accumulator's and bf16 accepted, others refused",
          "[attention]") {
  json args = {{"q", "bf16[1,8,2,8]"}, {"k", "bf16[1,8,2,8]"}, {"v", "bf16[1,8,2,8]"}};
  const BoundArgs plain = bind_args(args);
  for (const char* accepted : {"auto", "f32", "float32"}) {
    args["logits_dtype"] = accepted;
    CHECK(bind_args(args).args == plain.args);  // the same problem, the same cache key
  }
  args["logits_dtype"] = "bf16";  // rounds the logits: a problem of its own
  CHECK(bind_args(args).args != plain.args);
  for (const char* refused : {"f16", "f64", "int7"}) {
    args["logits_dtype"] = refused;
    CAPTURE(refused);
    CHECK(bind_error_field(dot_product_attention_op(), args) == "logits_dtype");
  }
}
