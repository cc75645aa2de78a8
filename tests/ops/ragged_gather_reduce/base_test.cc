// Tests of ragged_gather_reduce's binding, the API's index check, its reference against
// hand-checked sums (invalid routes never read, tokens without a valid route zero) and the
// oracle's bound (a sum off by a bf16 ulp fails it).
#include "ops/ragged_gather_reduce/base.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/ragged_gather_reduce/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/tensor_values.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

TEST_CASE("ragged_gather_reduce bind names the argument it rejects", "[ragged_gather_reduce]") {
  const json base = {{"x", "bf16[32,16]"},
                     {"indices", "i32[24]"},
                     {"topk_weights", "f32[24]"},
                     {"valid_rows_mask", "bool[24]"},
                     {"reduce_group_size", 8}};
  CHECK(bind_error_field(ragged_gather_reduce_op(), base) == "<no error>");
  auto with = [&](const char* key, json value) {
    json args = base;
    args[key] = std::move(value);
    return args;
  };
  const std::vector<std::pair<json, std::string>> bad = {
      {with("x", "i8[32,16]"), "x"},
      {with("x", "bf16[32]"), "x"},
      {with("x", "bf16[0,16]"), "x"},         // no rows for the routes
      {with("x", "f16[3000000000,0]"), "x"},  // more rows than i32 indices name
      {with("indices", "i8[24]"), "indices"},
      {with("topk_weights", "f32[23]"), "topk_weights"},
      {with("topk_weights", "i32[24]"), "topk_weights"},
      {with("valid_rows_mask", "i8[24]"), "valid_rows_mask"},
      {with("valid_rows_mask", "bool[25]"), "valid_rows_mask"},
      {with("reduce_group_size", 0), "reduce_group_size"},
      {with("reduce_group_size", -8), "reduce_group_size"},
      {with("reduce_group_size", 5), "reduce_group_size"},  // does not divide 24
      {with("reduce_group_size", 48), "reduce_group_size"},
      {with("reduce_group_size", 2.0), "reduce_group_size"},
      {with("top_k", 8), "top_k"},
  };
  for (const auto& [args, field] : bad) {
    CAPTURE(args.dump());
    CHECK(bind_error_field(ragged_gather_reduce_op(), args) == field);
  }
  const BoundArgs bound = ragged_gather_reduce_op().bind(base);
  CHECK(ragged_gather_reduce_op().outputs(bound).at(0).spec == TensorSpec{DType::kBF16, {3, 16}});
}

TEST_CASE("ragged_gather_reduce sums each token's valid routes and never reads an invalid one",
          "[ragged_gather_reduce]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Row 2 holds NaN: only an invalid route points at it.
  const Tensor x = tensor_of<float>({4, 3}, {1, 2, 3, 10, 20, 30, nan, nan, nan, -1, 0.5f, 4});
  // Token 0: routes 0 and 1 valid (rows 1 and 3); route 2 invalid (row 2: NaN); route 3
  // invalid with an index past x. Token 1: no valid route.
  const Tensor indices = tensor_of<int32_t>({6}, {1, 3, 2, 1000, -5, 0});
  const Tensor weights = tensor_of<float>({6}, {0.5f, 2.0f, 1.0f, 1.0f, 1.0f, 1.0f});
  Tensor valid(TensorSpec{DType::kBool, {6}});
  const std::vector<bool> flags = {true, true, false, false, false, false};
  for (int i = 0; i < 6; ++i) valid.data<bool>()[i] = flags[i];
  for (const char* impl : {"reference", "cpu"}) {
    CAPTURE(impl);
    const Tensor out =
        ragged_gather_reduce(x, indices, weights, valid, 3, {.implementation = impl});
    CHECK(out.spec() == TensorSpec{DType::kF32, {2, 3}});
    CHECK(row_of<float>(out, 0, 3) == std::vector<float>{0.5f * 10 - 2, 0.5f * 20 + 1, 15 + 8});
    CHECK(row_of<float>(out, 1, 3) == std::vector<float>{0, 0, 0});
  }
  // A valid route's index must be a row of x.
  valid.data<bool>()[3] = true;
  try {
    ragged_gather_reduce(x, indices, weights, valid, 3);
    FAIL("a valid route past x's rows was accepted");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "indices");
    CHECK(std::string(e.what()).find("indices[3] = 1000") != std::string::npos);
  }
}

TEST_CASE(
    "ragged_gather_reduce generates 7/8 valid routes with invalid ones at -1, and its oracle "
    "rejects a sum two bf16 ulps off",
    "[ragged_gather_reduce]") {
  const BoundArgs args = ragged_gather_reduce_op().bind({{"x", "bf16[256,64]"},
                                                         {"indices", "i32[2048]"},
                                                         {"topk_weights", "bf16[2048]"},
                                                         {"valid_rows_mask", "bool[2048]"},
                                                         {"reduce_group_size", 8}});
  const TensorMap inputs = ragged_gather_reduce_op().make_inputs(args, 2);
  const bool* valid = inputs.at("valid_rows_mask").data<bool>();
  const int32_t* indices = inputs.at("indices").data<int32_t>();
  int64_t count = 0;
  for (int64_t r = 0; r < 2048; ++r) {
    count += valid[r];
    CHECK((valid[r] ? indices[r] >= 0 && indices[r] < 256 : indices[r] == -1));
  }
  CHECK(count > 2048 * 0.8);
  CHECK(count < 2048 * 0.95);

  TensorMap outputs = ragged_gather_reduce_op().allocate_outputs(args);
  run_json(ragged_gather_reduce_op().implementation("reference"), args, json::object(), inputs,
           outputs);
  std::vector<int64_t> index(256 * 64);
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<int64_t>(i);
  const OracleSample oracle = ragged_gather_reduce_op().oracle(args, inputs, "out", index);
  const ErrorModel model = ragged_gather_reduce_op().error_model(args);
  Tensor& out = outputs.at("out");
  CHECK(judge(compare_to_oracle(out, oracle, model)) == Disposition::kPassed);
  bf16& first = out.data<bf16>()[100];
  first.bits = static_cast<uint16_t>(first.bits + 2);  // 1.5 ulp off at least: past u |y|
  CHECK(judge(compare_to_oracle(out, oracle, model)) == Disposition::kFailed);
}
