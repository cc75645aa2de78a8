// Tests for ragged_dot's spec: binding and its errors, group-size generation, the reference.
#include "ops/ragged_dot/base.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/ragged_dot/api.h"

using namespace tokamax;
using nlohmann::json;

namespace {

// The field an InvalidArgument names, or "<no error>".
std::string bind_error_field(const json& args) {
  try {
    ragged_dot_op().bind(args);
  } catch (const InvalidArgument& e) {
    return e.field();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("ragged_dot bind errors name the offending argument", "[ragged_dot]") {
  const json base = {{"lhs", "f32[8,4]"}, {"rhs", "f32[2,4,3]"}, {"group_sizes", {3, 5}}};
  CHECK(bind_error_field(base) == "<no error>");

  json mismatched_k = base;
  mismatched_k["rhs"] = "f32[2,5,3]";
  CHECK(bind_error_field(mismatched_k) == "rhs");

  json sum_too_big = base;
  sum_too_big["group_sizes"] = {5, 5};
  CHECK(bind_error_field(sum_too_big) == "group_sizes");

  json negative = base;
  negative["group_sizes"] = {-1, 3};
  CHECK(bind_error_field(negative) == "group_sizes");

  json wrong_count = base;
  wrong_count["group_sizes"] = {4};
  CHECK(bind_error_field(wrong_count) == "group_sizes");

  json wrong_num_groups = base;
  wrong_num_groups["group_sizes"] = {{"num_groups", 3}, {"total", 4}};
  CHECK(bind_error_field(wrong_num_groups) == "group_sizes");

  json unknown = base;
  unknown["transpose_rhs"] = true;
  CHECK(bind_error_field(unknown) == "transpose_rhs");

  json bad_rank = base;
  bad_rank["lhs"] = "f32[8]";
  CHECK(bind_error_field(bad_rank) == "lhs");

  json missing = base;
  missing.erase("rhs");
  CHECK(bind_error_field(missing) == "rhs");
}

TEST_CASE("ragged_dot bind fills defaults canonically", "[ragged_dot]") {
  const BoundArgs bf16 =
      ragged_dot_op().bind({{"lhs", "bf16[8,4]"}, {"rhs", "bf16[2,4,3]"}, {"group_sizes", {3, 5}}});
  CHECK(bf16.option("preferred_element_type") == "f32");

  const BoundArgs f64 = ragged_dot_op().bind({{"lhs", "f64[8,4]"}, {"rhs", "f64[2,4,3]"}});
  CHECK(f64.option("preferred_element_type") == "f64");
  // No group_sizes: M split as evenly as possible.
  CHECK(f64.option("group_sizes") == json({4, 4}));

  const BoundArgs explicit_out = ragged_dot_op().bind(
      {{"lhs", "bf16[8,4]"}, {"rhs", "bf16[2,4,3]"}, {"preferred_element_type", "bfloat16"}});
  CHECK(explicit_out.option("preferred_element_type") == "bf16");
}

TEST_CASE("ragged_dot random group sizes are reproducible and sum to total", "[ragged_dot]") {
  const json args = {{"lhs", "f32[1000,4]"},
                     {"rhs", "f32[16,4,3]"},
                     {"group_sizes", {{"num_groups", 16}, {"total", 900}, {"seed", 7}}}};
  const json sizes = ragged_dot_op().bind(args).option("group_sizes");
  CHECK(sizes == ragged_dot_op().bind(args).option("group_sizes"));
  const std::vector<int64_t> values = sizes.get<std::vector<int64_t>>();
  REQUIRE(values.size() == 16);
  CHECK(std::accumulate(values.begin(), values.end(), int64_t{0}) == 900);
  for (int64_t v : values) CHECK(v >= 0);

  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::vector<int64_t> s = random_group_sizes(5, 37, seed);
    CHECK(s.size() == 5);
    CHECK(std::accumulate(s.begin(), s.end(), int64_t{0}) == 37);
  }
  CHECK(even_group_sizes(3, 7) == std::vector<int64_t>{3, 2, 2});
}

TEST_CASE("ragged_dot reference<float> matches a hand-computed 2-group case", "[ragged_dot]") {
  // Rows 0 | 1-2 | 3: group 0 (identity), group 1, and one row past the group sum.
  const BoundArgs args =
      ragged_dot_op().bind({{"lhs", "f32[4,2]"}, {"rhs", "f32[2,2,2]"}, {"group_sizes", {1, 2}}});
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  Tensor lhs(args.tensor("lhs"));
  Tensor rhs(args.tensor("rhs"));
  const double lhs_values[] = {1, 2, 3, 4, 5, 6, 7, 8};
  const double rhs_values[] = {1, 0, 0, 1,   // rhs[0] = [[1, 0], [0, 1]]
                               1, 2, 3, 4};  // rhs[1] = [[1, 2], [3, 4]]
  for (int i = 0; i < 8; ++i) {
    lhs.set(i, lhs_values[i]);
    rhs.set(i, rhs_values[i]);
  }
  Tensor out(TensorSpec{DType::kF32, {4, 2}});
  for (int i = 0; i < 8; ++i) out.set(i, -99.0);  // the reference must write every element
  ragged_dot_reference<float>(p, lhs, rhs, out);
  // [1,2] @ I = [1,2]; [3,4] @ [[1,2],[3,4]] = [15,22]; [5,6] @ ... = [23,34]; row 3 is zero.
  const double expected[] = {1, 2, 15, 22, 23, 34, 0, 0};
  for (int i = 0; i < 8; ++i) CHECK(out.get(i) == expected[i]);
}

TEST_CASE("ragged_dot reference<float> agrees with the float64 oracle", "[ragged_dot]") {
  const RaggedDotOp& op = ragged_dot_op();
  for (const json& args_json :
       {json{{"lhs", "f32[40,33]"}, {"rhs", "f32[4,33,17]"}, {"group_sizes", {7, 0, 13, 11}}},
        json{{"lhs", "bf16[30,64]"}, {"rhs", "bf16[3,64,24]"}, {"group_sizes", {0, 29, 1}}},
        json{{"lhs", "f16[16,5]"},
             {"rhs", "f16[2,5,8]"},
             {"group_sizes", {9, 3}},
             {"preferred_element_type", "f16"}}}) {
    CAPTURE(args_json.dump());
    const BoundArgs args = op.bind(args_json);
    const RaggedDotProblem p = RaggedDotProblem::from(args);
    const TensorMap inputs = op.make_inputs(args, 3);
    TensorMap outputs = op.allocate_outputs(args);
    Tensor& out = outputs.at("out");
    ragged_dot_reference<float>(p, inputs.at("lhs"), inputs.at("rhs"), out);

    std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
    std::iota(index.begin(), index.end(), 0);
    const OracleSample oracle = op.oracle(args, inputs, "out", index);
    const ErrorModel model = op.error_model(args);
    // Absolute floor for outputs that land in f16's subnormal range (spacing 2^-24).
    const double floor = p.out_dtype == DType::kF16 ? std::ldexp(1.0, -24) : 0.0;
    for (size_t s = 0; s < index.size(); ++s) {
      const double bound =
          model.accumulation_length * model.accumulation_roundoff * oracle.magnitude[s] +
          model.output_roundoff * std::fabs(oracle.value[s]) + floor;
      CAPTURE(s, oracle.value[s], oracle.magnitude[s]);
      REQUIRE(std::fabs(out.get(index[s]) - oracle.value[s]) <= bound);
    }
  }
}
