// Tests of top_k's binding, its reference against hand-checked selections and the oracle, and the
// oracle's exactness (a selection off by one tie fails it).
#include "ops/top_k/base.h"

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/top_k/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/tensor_values.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace

TEST_CASE("top_k bind names the argument it rejects", "[top_k]") {
  const json base = {{"scores", "f32[4,16]"}, {"k", 3}};
  CHECK(bind_error_field(top_k_op(), base) == "<no error>");
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"scores", "f32[16]"}, {"k", 3}}, "scores"},
      {{{"scores", "bf16[4,16]"}, {"k", 3}}, "scores"},
      {{{"scores", "f32[4,16]"}, {"k", 0}}, "k"},
      {{{"scores", "f32[4,16]"}, {"k", 17}}, "k"},
      {{{"scores", "f32[4,16]"}, {"k", 2.5}}, "k"},
      {{{"scores", "f32[4,16]"}}, "k"},
      {{{"scores", "f32[4,16]"}, {"k", 3}, {"row_lengths", "i32[5]"}}, "row_lengths"},
      {{{"scores", "f32[4,16]"}, {"k", 3}, {"row_lengths", "f32[4]"}}, "row_lengths"},
      {{{"scores", "f32[4,16]"}, {"k", 3}, {"return_scores", 1}}, "return_scores"},
      {{{"scores", "f32[4,16]"}, {"k", 3}, {"sorted", true}}, "sorted"},
  };
  for (const auto& [args, field] : bad) {
    CAPTURE(args.dump());
    CHECK(bind_error_field(top_k_op(), args) == field);
  }
  // Canonical: the default return_scores stays out of the key; i32 scores bind.
  const BoundArgs bound =
      top_k_op().bind({{"scores", "i32[4,16]"}, {"k", 16}, {"return_scores", false}});
  CHECK_FALSE(bound.has("return_scores"));
  CHECK(top_k_op().outputs(bound).size() == 1);
}

TEST_CASE("top_k reference: descending, ties to the lower column, -inf and NaN never chosen",
          "[top_k]") {
  // Row 0: ties (3 at columns 1 and 2), -0.0 at 3 below +0.0 at 4 (XLA's total order), NaN and
  // -inf ineligible.
  // Row 1: fewer eligible than k: -1 padding. Row 2: row_lengths clips it to its first 2 columns.
  const std::vector<float> values = {1,     3,     3, -0.0f, 0.0f, kNaN, -kInf, 2,      //
                                     -kInf, kNaN,  5, -kInf, kNaN, kNaN, -kInf, -kInf,  //
                                     0.5f,  0.25f, 9, 9,     9,    9,    9,     9};
  const Tensor scores = tensor_of<float>({3, 8}, values);
  const Tensor lengths = tensor_of<int32_t>({3}, {100, 8, 2});
  const TopKResult result =
      top_k(scores, 5, &lengths, {.return_scores = true, .implementation = "reference"});
  CHECK(row_of<int32_t>(result.indices, 0, 5) == std::vector<int32_t>{1, 2, 7, 0, 4});
  CHECK(row_of<int32_t>(result.indices, 1, 5) == std::vector<int32_t>{2, -1, -1, -1, -1});
  CHECK(row_of<int32_t>(result.indices, 2, 5) == std::vector<int32_t>{0, 1, -1, -1, -1});
  const int32_t neg_inf = std::bit_cast<int32_t>(-kInf);
  CHECK(row_of<int32_t>(*result.scores_bits, 0, 5) ==
        std::vector<int32_t>{std::bit_cast<int32_t>(3.0f), std::bit_cast<int32_t>(3.0f),
                             std::bit_cast<int32_t>(2.0f), std::bit_cast<int32_t>(1.0f),
                             std::bit_cast<int32_t>(0.0f)});
  CHECK(row_of<int32_t>(*result.scores_bits, 1, 5) ==
        std::vector<int32_t>{std::bit_cast<int32_t>(5.0f), neg_inf, neg_inf, neg_inf, neg_inf});

  // The oracle agrees everywhere, and rejects the row-0 selection with its tie swapped.
  const BoundArgs args = top_k_op().bind(
      {{"scores", "f32[3,8]"}, {"k", 5}, {"row_lengths", "i32[3]"}, {"return_scores", true}});
  const TensorMap inputs = {{"scores", scores}, {"row_lengths", lengths}};
  std::vector<int64_t> index(15);
  for (int64_t i = 0; i < 15; ++i) index[i] = i;
  const ErrorModel model = top_k_op().error_model(args);
  for (const char* output : {"indices", "scores_bits"}) {
    const Tensor& out = std::string(output) == "indices" ? result.indices : *result.scores_bits;
    const OracleSample oracle = top_k_op().oracle(args, inputs, output, index);
    CHECK(judge(compare_to_oracle(out, oracle, model)) == Disposition::kPassed);
  }
  Tensor swapped(result.indices.spec());
  for (int64_t i = 0; i < 15; ++i) swapped.data<int32_t>()[i] = result.indices.data<int32_t>()[i];
  std::swap(swapped.data<int32_t>()[0], swapped.data<int32_t>()[1]);
  const OracleSample oracle = top_k_op().oracle(args, inputs, "indices", index);
  CHECK(judge(compare_to_oracle(swapped, oracle, model)) == Disposition::kFailed);
  // And -0.0 taken before +0.0.
  std::swap(swapped.data<int32_t>()[0], swapped.data<int32_t>()[1]);
  swapped.data<int32_t>()[4] = 3;
  CHECK(judge(compare_to_oracle(swapped, oracle, model)) == Disposition::kFailed);
}

TEST_CASE("top_k reads i32 scores as f32 bits and clips row_lengths to [0, n]", "[top_k]") {
  Tensor bits(TensorSpec{DType::kI32, {2, 4}});
  const std::vector<float> values = {0.5f, -1.0f, 7.0f, 7.0f, 1.0f, 2.0f, 3.0f, 4.0f};
  for (int i = 0; i < 8; ++i) bits.data<int32_t>()[i] = std::bit_cast<int32_t>(values[i]);
  const Tensor lengths = tensor_of<int32_t>({2}, {-3, 9});
  const TopKResult result = top_k(bits, 2, &lengths, {.implementation = "reference"});
  CHECK(row_of<int32_t>(result.indices, 0, 2) == std::vector<int32_t>{-1, -1});
  CHECK(row_of<int32_t>(result.indices, 1, 2) == std::vector<int32_t>{3, 2});
  const TopKResult full = top_k(bits, 2, nullptr, {.implementation = "reference"});
  CHECK(row_of<int32_t>(full.indices, 0, 2) == std::vector<int32_t>{2, 3});
}

TEST_CASE("top_k's generated inputs hold ties, -inf, NaN and every kind of row length", "[top_k]") {
  const BoundArgs args =
      top_k_op().bind({{"scores", "f32[64,512]"}, {"k", 8}, {"row_lengths", "i32[64]"}});
  const TensorMap inputs = top_k_op().make_inputs(args, 3);
  const float* s = inputs.at("scores").data<float>();
  int64_t neg_inf = 0, nan = 0, neg_zero = 0;
  for (int64_t i = 0; i < 64 * 512; ++i) {
    neg_inf += s[i] == -kInf;
    nan += std::isnan(s[i]);
    neg_zero += s[i] == 0.0f && std::signbit(s[i]);
  }
  CHECK(neg_inf > 0);
  CHECK(nan > 0);
  CHECK(neg_zero > 0);
  const int32_t* len = inputs.at("row_lengths").data<int32_t>();
  CHECK(std::any_of(len, len + 64, [](int32_t v) { return v <= 0; }));
  CHECK(std::any_of(len, len + 64, [](int32_t v) { return v >= 512; }));
  CHECK(std::any_of(len, len + 64, [](int32_t v) { return v > 0 && v < 512; }));
}
