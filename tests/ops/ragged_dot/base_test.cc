// Tests for ragged_dot's spec: binding and its errors, group-size generation, the reference.
#include "ops/ragged_dot/base.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/ragged_dot/api.h"
#include "tests/ops/bind_errors.h"

using namespace tokamax;
using nlohmann::json;
using testing::bind_error_field;

TEST_CASE("ragged_dot bind errors name the offending argument", "[ragged_dot]") {
  const json base = {{"lhs", "f32[8,4]"}, {"rhs", "f32[2,4,3]"}, {"group_sizes", {3, 5}}};
  CHECK(bind_error_field(ragged_dot_op(), base) == "<no error>");

  json mismatched_k = base;
  mismatched_k["rhs"] = "f32[2,5,3]";
  CHECK(bind_error_field(ragged_dot_op(), mismatched_k) == "rhs");

  json sum_too_big = base;
  sum_too_big["group_sizes"] = {5, 5};
  CHECK(bind_error_field(ragged_dot_op(), sum_too_big) == "group_sizes");

  json negative = base;
  negative["group_sizes"] = {-1, 3};
  CHECK(bind_error_field(ragged_dot_op(), negative) == "group_sizes");

  json wrong_count = base;
  wrong_count["group_sizes"] = {4};
  CHECK(bind_error_field(ragged_dot_op(), wrong_count) == "group_sizes");

  json wrong_num_groups = base;
  wrong_num_groups["group_sizes"] = {{"num_groups", 3}, {"total", 4}};
  CHECK(bind_error_field(ragged_dot_op(), wrong_num_groups) == "group_sizes");

  json unknown = base;
  unknown["transpose_rhs"] = true;
  CHECK(bind_error_field(ragged_dot_op(), unknown) == "transpose_rhs");

  json bad_rank = base;
  bad_rank["lhs"] = "f32[8]";
  CHECK(bind_error_field(ragged_dot_op(), bad_rank) == "lhs");

  json missing = base;
  missing.erase("rhs");
  CHECK(bind_error_field(ragged_dot_op(), missing) == "rhs");
}

TEST_CASE("ragged_dot bind errors of the epilogue arguments name them", "[ragged_dot]") {
  const json base = {{"lhs", "f32[8,4]"}, {"rhs", "f32[2,4,6]"}, {"group_sizes", {3, 5}}};
  auto with = [&](const std::string& key, const json& value) {
    json args = base;
    args[key] = value;
    return args;
  };
  CHECK(bind_error_field(ragged_dot_op(), with("group_offset", -1)) == "group_offset");
  CHECK(bind_error_field(ragged_dot_op(), with("group_offset", "one")) == "group_offset");
  // group_offset 1 with G = 2 owned groups needs at least 3 entries.
  CHECK(bind_error_field(ragged_dot_op(), with("group_offset", 1)) == "group_sizes");
  json offset_ok = with("group_offset", 1);
  offset_ok["group_sizes"] = {1, 3, 4};
  CHECK(bind_error_field(ragged_dot_op(), offset_ok) == "<no error>");
  CHECK(bind_error_field(ragged_dot_op(), with("rhs_bias", "f32[2,5]")) == "rhs_bias");
  CHECK(bind_error_field(ragged_dot_op(), with("rhs_bias", "f32[6]")) == "rhs_bias");
  CHECK(bind_error_field(ragged_dot_op(), with("rhs_bias", "f32[2,6]")) == "<no error>");
  CHECK(bind_error_field(ragged_dot_op(), with("activation", "swish")) == "activation");
  CHECK(bind_error_field(ragged_dot_op(), with("activation", 3)) == "activation");
  CHECK(bind_error_field(ragged_dot_op(), with("fuse_gateup_activation", "tanh")) ==
        "fuse_gateup_activation");
  json odd_n = with("fuse_gateup_activation", "silu");
  odd_n["rhs"] = "f32[2,4,5]";
  CHECK(bind_error_field(ragged_dot_op(), odd_n) == "fuse_gateup_activation");
  json both = with("fuse_gateup_activation", "silu");
  both["activation"] = "relu";
  CHECK(bind_error_field(ragged_dot_op(), both) == "activation");
  CHECK(bind_error_field(ragged_dot_op(), with("zero_initialize", "yes")) == "zero_initialize");
  CHECK(bind_error_field(ragged_dot_op(), with("zero_initialize", false)) == "<no error>");
}

TEST_CASE("ragged_dot problem of a group_offset owns the middle groups", "[ragged_dot]") {
  const BoundArgs args = ragged_dot_op().bind({{"lhs", "f32[20,4]"},
                                               {"rhs", "f32[2,4,6]"},
                                               {"group_offset", 1},
                                               {"group_sizes", {3, 5, 0, 7}},
                                               {"fuse_gateup_activation", "swigluoai"}});
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  CHECK(p.all_group_sizes == std::vector<int64_t>{3, 5, 0, 7});
  CHECK(p.group_sizes == std::vector<int64_t>{5, 0});
  CHECK(p.group_starts == std::vector<int64_t>{3, 8, 8});
  CHECK(p.first_row() == 3);
  CHECK(p.owned_rows() == 5);
  CHECK(p.out_N() == 3);
  CHECK(ragged_dot_op().outputs(args).at(0).spec.dims == std::vector<int64_t>{20, 3});
  // group_sizes carries all four groups.
  CHECK(ragged_dot_op().inputs(args).at(2).spec.dims == std::vector<int64_t>{4});
  CHECK(ragged_dot_op().flops(args) == 2.0 * 5 * 4 * 6);
  CHECK(p.extended_arguments() == "group_offset=1 of 4 groups, fuse_gateup_activation=swigluoai");
}

TEST_CASE("ragged_dot reference<float> applies group_offset, bias and the fused gate/up",
          "[ragged_dot]") {
  // 5 rows: group 0 of group_sizes (1 row, another shard's), the owned groups 1 (2 rows) and
  // 2 (1 row), one row past the sum. rhs[g] = [gate | up] with N = 4, out_N = 2.
  for (const char* gate_up :
       {"silu", "gelu", "gelu_erf", "swigluoai", "silu_and_mul_with_clamp", "situ:1.5:2"}) {
    CAPTURE(gate_up);
    const BoundArgs args = ragged_dot_op().bind({{"lhs", "f32[5,2]"},
                                                 {"rhs", "f32[2,2,4]"},
                                                 {"rhs_bias", "f32[2,4]"},
                                                 {"group_offset", 1},
                                                 {"group_sizes", {1, 2, 1}},
                                                 {"fuse_gateup_activation", gate_up}});
    const RaggedDotProblem p = RaggedDotProblem::from(args);
    Tensor lhs(args.tensor("lhs")), rhs(args.tensor("rhs")), bias(args.tensor("rhs_bias"));
    const double lhs_values[] = {9, 9, 1, 2, 3, 4, -1, 0.5, 9, 9};
    const double rhs_values[] = {1,  0, 2, 1, 0, 1,  1, 3,   // rhs[0]
                                 -1, 2, 0, 1, 1, -3, 2, 0};  // rhs[1]
    const double bias_values[] = {0.5, -0.5, 1, 0, 0, 0.25, -1, 2};
    for (int i = 0; i < 10; ++i) lhs.set(i, lhs_values[i]);
    for (int i = 0; i < 16; ++i) rhs.set(i, rhs_values[i]);
    for (int i = 0; i < 8; ++i) bias.set(i, bias_values[i]);
    Tensor out(TensorSpec{DType::kF32, {5, 2}});
    for (int i = 0; i < 10; ++i) out.set(i, -99.0);
    ragged_dot_reference<float>(p, lhs, rhs, out, &bias);
    SituGlu situ;
    const GateUp kind = parse_gate_up(gate_up, &situ);
    auto expect = [&](int row, int g, int col) {
      double y[4];
      for (int n = 0; n < 4; ++n) {
        y[n] = bias_values[g * 4 + n];
        for (int k = 0; k < 2; ++k)
          y[n] += lhs_values[row * 2 + k] * rhs_values[(g * 2 + k) * 4 + n];
      }
      return apply_gate_up<double>(kind, situ, y[col], y[col + 2]);
    };
    CHECK(out.get(0) == 0);  // another shard's group
    CHECK(out.get(1) == 0);
    for (int row = 1; row <= 3; ++row) {
      const int g = row <= 2 ? 0 : 1;
      for (int col = 0; col < 2; ++col) {
        CHECK(out.get(row * 2 + col) == Approx(expect(row, g, col)).epsilon(1e-6).margin(1e-6));
      }
    }
    CHECK(out.get(8) == 0);  // past the sum
    CHECK(out.get(9) == 0);
  }
  // swigluoai clamps: gate above 7 is 7, up beyond +-7 is +-7.
  CHECK(clamped_glu(kSwigluOai, 10.0, 20.0) == Approx(8.0 * 7.0 / (1.0 + std::exp(-1.702 * 7.0))));
  CHECK(clamped_glu(kSwigluOai, 10.0, -20.0) ==
        Approx(-6.0 * 7.0 / (1.0 + std::exp(-1.702 * 7.0))));
}

TEST_CASE("ragged_dot bind fills defaults canonically", "[ragged_dot]") {
  // Upstream's default: the inputs' common type (jnp.result_type).
  const BoundArgs bf16 =
      ragged_dot_op().bind({{"lhs", "bf16[8,4]"}, {"rhs", "bf16[2,4,3]"}, {"group_sizes", {3, 5}}});
  CHECK(bf16.option("preferred_element_type") == "bf16");
  const BoundArgs f16 = ragged_dot_op().bind({{"lhs", "f16[8,4]"}, {"rhs", "f16[2,4,3]"}});
  CHECK(f16.option("preferred_element_type") == "f16");
  const BoundArgs mixed = ragged_dot_op().bind({{"lhs", "bf16[8,4]"}, {"rhs", "f16[2,4,3]"}});
  CHECK(mixed.option("preferred_element_type") == "f32");
  const BoundArgs bf16_f32 = ragged_dot_op().bind({{"lhs", "bf16[8,4]"}, {"rhs", "f32[2,4,3]"}});
  CHECK(bf16_f32.option("preferred_element_type") == "f32");
  // The epilogue arguments at their defaults stay out of the canonical form (same cache keys).
  const BoundArgs defaults = ragged_dot_op().bind({{"lhs", "f32[8,4]"},
                                                   {"rhs", "f32[2,4,3]"},
                                                   {"group_sizes", {3, 5}},
                                                   {"group_offset", 0},
                                                   {"activation", "none"},
                                                   {"fuse_gateup_activation", nullptr},
                                                   {"zero_initialize", true}});
  CHECK(defaults.key() ==
        ragged_dot_op()
            .bind({{"lhs", "f32[8,4]"}, {"rhs", "f32[2,4,3]"}, {"group_sizes", {3, 5}}})
            .key());

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

TEST_CASE("ragged_dot quantized weights: bind, inputs, and a wrong scale block fails the bound",
          "[ragged_dot]") {
  const RaggedDotOp& op = ragged_dot_op();
  const json base = {{"lhs", "bf16[40,64]"},
                     {"rhs", "i8[2,64,24]"},
                     {"rhs_scale", "f32[2,4,24]"},
                     {"group_sizes", {15, 25}}};
  CHECK(bind_error_field(ragged_dot_op(), base) == "<no error>");
  auto with = [&](const std::string& key, const json& value) {
    json args = base;
    if (value.is_null()) {
      args.erase(key);
    } else {
      args[key] = value;
    }
    return args;
  };
  CHECK(bind_error_field(ragged_dot_op(), with("rhs_scale", nullptr)) ==
        "rhs");  // quantized needs a scale
  CHECK(bind_error_field(ragged_dot_op(), with("rhs_scale", "f32[2,3,24]")) ==
        "rhs_scale");  // 3 does not divide 64
  CHECK(bind_error_field(ragged_dot_op(), with("rhs_scale", "f32[2,24]")) == "<no error>");
  CHECK(bind_error_field(ragged_dot_op(), with("rhs_scale", "i8[2,24]")) == "rhs_scale");
  CHECK(bind_error_field(ragged_dot_op(), with("rhs", "bf16[2,64,24]")) ==
        "rhs_scale");  // a scale without codes
  CHECK(bind_error_field(ragged_dot_op(), with("lhs", "i8[40,64]")) == "lhs");
  CHECK(bind_error_field(ragged_dot_op(), with("maybe_quantize_lhs", 1)) == "maybe_quantize_lhs");
  json f8 = with("rhs", "f8e4m3[2,64,24]");
  f8["maybe_quantize_lhs"] = true;  // lhs quantized to e4m3 for e4m3 weights
  CHECK(bind_error_field(ragged_dot_op(), f8) == "<no error>");
  json float_weights = {{"lhs", "bf16[40,64]"},
                        {"rhs", "bf16[2,64,24]"},
                        {"maybe_quantize_lhs", true}};  // nothing to quantize to
  CHECK(bind_error_field(ragged_dot_op(), float_weights) == "maybe_quantize_lhs");

  const BoundArgs args = op.bind(base);
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  CHECK(p.quantized());
  CHECK(p.scale_blocks == 4);
  CHECK(p.block_k() == 16);
  CHECK(p.out_dtype == DType::kBF16);  // lhs's type
  const TensorMap inputs = op.make_inputs(args, 4);
  const Tensor& codes = inputs.at("rhs");
  double max_code = 0;
  for (int64_t i = 0; i < codes.num_elements(); ++i)
    max_code = std::max(max_code, std::fabs(codes.get(i)));
  CHECK(max_code > 60);  // the codes use the int8 range
  CHECK(max_code <= 127);

  TensorMap outputs = op.allocate_outputs(args);
  op.implementation("reference")
      .prepare(args, cpu::host_device())
      ->heuristics_kernel()
      .run(inputs, outputs);
  std::vector<int64_t> index(static_cast<size_t>(outputs.at("out").num_elements()));
  std::iota(index.begin(), index.end(), 0);
  const OracleSample oracle = op.oracle(args, inputs, "out", index);
  CHECK(judge(compare_to_oracle(outputs.at("out"), oracle, op.error_model(args))) ==
        Disposition::kPassed);
  // The same product with block 0's scales everywhere: outside the bound.
  TensorMap wrong_inputs = op.make_inputs(args, 4);
  Tensor& scale = wrong_inputs.at("rhs_scale");
  for (int64_t g = 0; g < 2; ++g) {
    for (int64_t b = 1; b < 4; ++b) {
      for (int64_t n = 0; n < 24; ++n) scale.set((g * 4 + b) * 24 + n, scale.get((g * 4) * 24 + n));
    }
  }
  TensorMap wrong = op.allocate_outputs(args);
  op.implementation("reference")
      .prepare(args, cpu::host_device())
      ->heuristics_kernel()
      .run(wrong_inputs, wrong);
  CHECK(judge(compare_to_oracle(wrong.at("out"), oracle, op.error_model(args))) ==
        Disposition::kFailed);
}

TEST_CASE("ragged_dot reference passes the oracle's bound with every epilogue argument",
          "[ragged_dot]") {
  const RaggedDotOp& op = ragged_dot_op();
  const json base = {{"lhs", "bf16[60,48]"},
                     {"rhs", "bf16[3,48,40]"},
                     {"group_sizes", {0, 13, 20, 19, 0}},
                     {"group_offset", 1}};
  std::vector<json> cases;
  for (const char* out : {"f32", "bf16", "f16"}) {
    for (const char* act : {"none", "silu", "gelu", "gelu_tanh", "relu", "sigmoid"}) {
      json c = base;
      c["preferred_element_type"] = out;
      c["activation"] = act;
      c["rhs_bias"] = "f32[3,40]";
      cases.push_back(c);
    }
    for (const char* gate_up : {"silu", "gelu", "gelu_erf", "swigluoai"}) {
      json c = base;
      c["preferred_element_type"] = out;
      c["fuse_gateup_activation"] = gate_up;
      if (std::string(gate_up) != "gelu") c["rhs_bias"] = "bf16[3,40]";
      cases.push_back(c);
    }
  }
  for (const json& args_json : cases) {
    CAPTURE(args_json.dump());
    const BoundArgs args = op.bind(args_json);
    const TensorMap inputs = op.make_inputs(args, 5);
    TensorMap outputs = op.allocate_outputs(args);
    op.implementation("reference")
        .prepare(args, cpu::host_device())
        ->heuristics_kernel()
        .run(inputs, outputs);
    const Tensor& out = outputs.at("out");
    std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
    std::iota(index.begin(), index.end(), 0);
    const Comparison c =
        compare_to_oracle(out, op.oracle(args, inputs, "out", index), op.error_model(args));
    CAPTURE(c.worst_ratio, c.max_abs_error, c.worst_index);
    CHECK(judge(c) == Disposition::kPassed);
    CHECK(c.worst_ratio > 0);  // the bound is tight enough that rounding shows
  }
}

TEST_CASE("ragged_dot zero_initialize=false leaves the rows outside the owned groups as they were",
          "[ragged_dot]") {
  const RaggedDotOp& op = ragged_dot_op();
  const json base = {{"lhs", "bf16[60,32]"},    {"rhs", "bf16[2,32,48]"},
                     {"group_offset", 1},       {"group_sizes", {10, 20, 15, 5}},
                     {"rhs_bias", "f32[2,48]"}, {"activation", "silu"}};
  json kept = base;
  kept["zero_initialize"] = false;
  const BoundArgs zeroed = op.bind(base), untouched = op.bind(kept);
  CHECK(zeroed.key() != untouched.key());
  CHECK_FALSE(RaggedDotProblem::from(untouched).zero_initialize);
  const TensorMap inputs = op.make_inputs(untouched, 8);
  std::vector<int64_t> index(60 * 48);
  std::iota(index.begin(), index.end(), 0);
  const OracleSample oracle = op.oracle(zeroed, inputs, "out", index);
  int checked = 0;
  for (const Implementation* impl : op.implementations()) {
    CAPTURE(impl->name());
    const auto prepared = impl->prepare(untouched, cpu::host_device());
    try {
      prepared->check();
    } catch (const NotImplemented& e) {
      // Those without it say so.
      CHECK_THAT(e.what(), Catch::Contains("zero_initialize=false") ||
                               Catch::Contains("no CUDA device") || Catch::Contains("bf16"));
      continue;
    }
    TensorMap outputs = op.allocate_outputs(untouched);
    Tensor& out = outputs.at("out");
    for (int64_t i = 0; i < out.num_elements(); ++i) out.set(i, 7.0);
    prepared->heuristics_kernel().run(inputs, outputs);
    for (int64_t row = 0; row < 60; ++row) {
      const bool owned = row >= 10 && row < 45;
      for (int64_t col = 0; col < 48; ++col) {
        const int64_t i = row * 48 + col;
        if (owned) {
          CHECK(std::fabs(out.get(i) - oracle.value[i]) <=
                1e-2 * (1.0 + std::fabs(oracle.value[i])));
        } else {
          CHECK(out.get(i) == 7.0);
        }
      }
    }
    ++checked;
  }
  CHECK(checked >= 2);  // the reference and the cpu kernel at least
}
