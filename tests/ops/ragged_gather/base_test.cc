// Tests of ragged_gather's binding, the API's index check, its reference against hand-checked
// rows and the oracle (which compares only rows [start, end)).
#include "ops/ragged_gather/base.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/ragged_gather/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/tensor_values.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

TEST_CASE("ragged_gather bind names the argument it rejects", "[ragged_gather]") {
  const json base = {{"x", "bf16[8,16]"}, {"indices", "i32[20]"}, {"start", 2}, {"end", 20}};
  CHECK(bind_error_field(ragged_gather_op(), base) == "<no error>");
  auto with = [&](const char* key, json value) {
    json args = base;
    args[key] = std::move(value);
    return args;
  };
  const std::vector<std::pair<json, std::string>> bad = {
      {with("x", "bf16[8]"), "x"},
      {with("indices", "i64[20]"), "indices"},
      {with("indices", "f32[20]"), "indices"},
      {with("indices", "i32[4,5]"), "indices"},
      {with("start", -1), "start"},
      {with("start", 21), "start"},
      {with("end", 1), "end"},  // below start
      {with("end", 21), "end"},
      {with("end", "all"), "end"},
      {{{"x", "bf16[8,16]"}, {"indices", "i32[20]"}, {"start", 0}}, "end"},
      {with("x", "bf16[0,16]"), "x"},         // no rows to gather from
      {with("x", "f32[3000000000,0]"), "x"},  // more rows than i32 indices name
      {with("trim_rows", true), "trim_rows"},
  };
  for (const auto& [args, field] : bad) {
    CAPTURE(args.dump());
    CHECK(bind_error_field(ragged_gather_op(), args) == field);
  }
  // Every dtype binds (rows are copied); an empty range binds even without rows.
  for (const char* x : {"i8[8,16]", "bool[8,16]", "f8e4m3[8,16]", "f64[8,16]", "i32[8,16]"}) {
    CHECK(bind_error_field(ragged_gather_op(), with("x", x)) == "<no error>");
  }
  CHECK(bind_error_field(ragged_gather_op(),
                         {{"x", "f32[0,4]"}, {"indices", "i32[3]"}, {"start", 1}, {"end", 1}}) ==
        "<no error>");
}

TEST_CASE("ragged_gather copies the rows from start to end and checks the indices it reads",
          "[ragged_gather]") {
  const Tensor x = tensor_of<int8_t>({3, 2}, {1, 2, 3, 4, 5, 6});
  // Entries outside [1, 4) are never read, so they may be anything.
  const Tensor indices = tensor_of<int32_t>({5}, {99, 2, 0, 2, -7});
  for (const char* impl : {"reference", "cpu"}) {
    CAPTURE(impl);
    const Tensor out = ragged_gather(x, indices, 1, 4, {.implementation = impl});
    CHECK(out.spec() == TensorSpec{DType::kI8, {5, 2}});
    CHECK(row_of<int8_t>(out, 1, 2) == std::vector<int8_t>{5, 6});
    CHECK(row_of<int8_t>(out, 2, 2) == std::vector<int8_t>{1, 2});
    CHECK(row_of<int8_t>(out, 3, 2) == std::vector<int8_t>{5, 6});
  }
  const Tensor wild = tensor_of<int32_t>({5}, {0, 3, 0, 0, 0});
  try {
    ragged_gather(x, wild, 0, 5);
    FAIL("an index past x's rows was accepted");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "indices");
    CHECK(std::string(e.what()).find("indices[1] = 3") != std::string::npos);
  }
  const Tensor negative = tensor_of<int32_t>({5}, {0, 0, 0, 0, -1});
  CHECK_THROWS_AS(ragged_gather(x, negative, 0, 5), InvalidArgument);
  CHECK_NOTHROW(ragged_gather(x, negative, 0, 4));
}

TEST_CASE("ragged_gather's oracle is exact and sampled between start and end only",
          "[ragged_gather]") {
  const BoundArgs args = ragged_gather_op().bind(
      {{"x", "f32[50,8]"}, {"indices", "i32[400]"}, {"start", 300}, {"end", 310}});
  const TensorDecl out = ragged_gather_op().outputs(args).at(0);
  CHECK(ragged_gather_op().defined_range(args, out) == std::pair<int64_t, int64_t>{2400, 2480});
  const TensorMap inputs = ragged_gather_op().make_inputs(args, 1);
  // A tiny budget still samples only defined elements, the range's first and last included.
  const OracleSet oracle = sample_oracle(ragged_gather_op(), args, inputs, 10.0, 1);
  const std::vector<int64_t>& index = oracle.at("out").index;
  REQUIRE(!index.empty());
  CHECK(index.front() == 2400);
  CHECK(index.back() == 2479);
  // The reference passes; one element off by one ulp fails (the oracle is exact).
  TensorMap outputs = ragged_gather_op().allocate_outputs(args);
  run_json(ragged_gather_op().implementation("reference"), args, json::object(), inputs, outputs);
  const ErrorModel model = ragged_gather_op().error_model(args);
  CHECK(judge(compare_to_oracle(outputs.at("out"), oracle.at("out"), model)) ==
        Disposition::kPassed);
  float& first = outputs.at("out").data<float>()[2400];
  first = std::nextafter(first, 1e30f);
  CHECK(judge(compare_to_oracle(outputs.at("out"), oracle.at("out"), model)) ==
        Disposition::kFailed);
  // Asking the oracle for an undefined row is an error.
  const std::vector<int64_t> outside = {0};
  CHECK_THROWS_AS(ragged_gather_op().oracle(args, inputs, "out", outside), InvalidArgument);
}
