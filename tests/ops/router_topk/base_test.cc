// Tests of router_topk's binding, its reference (upstream's k passes) against hand-checked rows
// and the oracle, and the oracle's exactness on NaN weights.
#include "ops/router_topk/base.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/router_topk/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/tensor_values.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace

TEST_CASE("router_topk bind names the argument it rejects", "[router_topk]") {
  CHECK(bind_error_field(router_topk_op(), {{"scores", "bf16[8,256]"}, {"k", 8}}) == "<no error>");
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"scores", "f32[256]"}, {"k", 8}}, "scores"},
      {{{"scores", "i32[8,256]"}, {"k", 8}}, "scores"},
      {{{"scores", "f64[8,256]"}, {"k", 8}}, "scores"},
      {{{"scores", "f32[8,256]"}, {"k", 0}}, "k"},
      {{{"scores", "f32[8,256]"}, {"k", 257}}, "k"},
      {{{"scores", "f32[8,256]"}, {"k", "8"}}, "k"},
      {{{"scores", "f32[8,256]"}}, "k"},
      {{{"scores", "f32[8,256]"}, {"k", 8}, {"renormalize", true}}, "renormalize"},
  };
  for (const auto& [args, field] : bad) {
    CAPTURE(args.dump());
    CHECK(bind_error_field(router_topk_op(), args) == field);
  }
}

TEST_CASE("router_topk reference: upstream's rules on ties, clamped scores and empty rows",
          "[router_topk]") {
  const float fmax = std::numeric_limits<float>::max();
  // Row 0: ties (2 at experts 1 and 3, -0.0 and +0.0 at 4 and 5). Row 1: two real scores, then
  // the floor's ties go to the lowest experts (NaN, -inf, -FLT_MAX are all the floor). Row 2: no
  // real score: NaN weights, experts 0..k-1.
  const Tensor scores = tensor_of<float>({3, 6}, {1, 2, -1, 2, -0.0f, 0.0f,           //
                                                  kNaN, -kInf, 3, -fmax, 0.5f, kNaN,  //
                                                  -kInf, kNaN, -fmax, -kInf, kNaN, kNaN});
  const RouterTopKResult result = router_topk(scores, 4, {.implementation = "reference"});
  CHECK(row_of<int32_t>(result.indices, 0, 4) == std::vector<int32_t>{1, 3, 0, 4});
  CHECK(row_of<float>(result.weights, 0, 4) == std::vector<float>{2, 2, 1, 0});
  CHECK(row_of<int32_t>(result.indices, 1, 4) == std::vector<int32_t>{2, 4, 0, 1});
  CHECK(row_of<float>(result.weights, 1, 4) ==
        std::vector<float>{3, 0.5f, kRouterFloor, kRouterFloor});
  CHECK(row_of<int32_t>(result.indices, 2, 4) == std::vector<int32_t>{0, 1, 2, 3});
  for (const float w : row_of<float>(result.weights, 2, 4)) CHECK(std::isnan(w));

  // The oracle agrees, and rejects a finite weight where the row has no real score.
  const BoundArgs args = router_topk_op().bind({{"scores", "f32[3,6]"}, {"k", 4}});
  const TensorMap inputs = {{"scores", scores}};
  std::vector<int64_t> index(12);
  for (int64_t i = 0; i < 12; ++i) index[i] = i;
  const ErrorModel model = router_topk_op().error_model(args);
  CHECK(judge(compare_to_oracle(result.indices,
                                router_topk_op().oracle(args, inputs, "indices", index), model)) ==
        Disposition::kPassed);
  const OracleSample weights = router_topk_op().oracle(args, inputs, "weights", index);
  CHECK(judge(compare_to_oracle(result.weights, weights, model)) == Disposition::kPassed);
  Tensor finite(result.weights.spec());
  for (int64_t i = 0; i < 12; ++i) finite.data<float>()[i] = result.weights.data<float>()[i];
  finite.data<float>()[8] = kRouterFloor;
  CHECK(judge(compare_to_oracle(finite, weights, model)) == Disposition::kFailed);
}

TEST_CASE("router_topk's generated inputs hold ties, floor scores and rows without a real score",
          "[router_topk]") {
  const BoundArgs args = router_topk_op().bind({{"scores", "f32[64,256]"}, {"k", 8}});
  const TensorMap inputs = router_topk_op().make_inputs(args, 3);
  const float* s = inputs.at("scores").data<float>();
  int64_t floor_scores = 0, empty_rows = 0;
  for (int64_t t = 0; t < 64; ++t) {
    bool real = false;
    for (int64_t e = 0; e < 256; ++e) {
      const float v = s[t * 256 + e];
      floor_scores += !(v > kRouterFloor);
      real = real || v > kRouterFloor;
    }
    empty_rows += !real;
  }
  CHECK(floor_scores > 64 * 4);
  CHECK(empty_rows == 4);
}
