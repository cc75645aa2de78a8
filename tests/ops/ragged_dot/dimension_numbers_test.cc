// Tests of ragged_dot's other dimension numbers (trans_rhs, ragged_contracting): binding (the
// spellings, shapes, what they refuse), the C++ entry point against hand-computed products, the
// cpu kernel against the float64 oracle on every SIMD target and bf16 engine this CPU has, and
// the VJP's refusal.
#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/ragged_dot/api.h"
#include "ops/ragged_dot/vjp/api.h"
#include "tests/ops/bind_errors.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/ops/tensor_values.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

json with(json args, const char* key, json value) {
  args[key] = std::move(value);
  return args;
}

const json kTrans = {{"lhs", "bf16[40,32]"},
                     {"rhs", "bf16[3,24,32]"},
                     {"group_sizes", {10, 0, 25}},
                     {"ragged_dot_dimension_numbers", "trans_rhs"}};
const json kContracting = {{"lhs", "bf16[50,20]"},
                           {"rhs", "bf16[50,12]"},
                           {"group_sizes", {15, 0, 30}},
                           {"ragged_dot_dimension_numbers", "ragged_contracting"}};

}  // namespace

TEST_CASE("ragged_dot binds trans_rhs and ragged_contracting and names what they refuse",
          "[ragged_dot]") {
  CHECK(bind_error_field(ragged_dot_op(), kTrans) == "<no error>");
  CHECK(bind_error_field(ragged_dot_op(), kContracting) == "<no error>");
  // Upstream's structure binds to the same canonical form (one cache key).
  const json upstream = {{"dot_dimension_numbers", {{{0}, {0}}, {json::array(), json::array()}}},
                         {"lhs_ragged_dimensions", {0}},
                         {"rhs_group_dimensions", json::array()}};
  CHECK(ragged_dot_op().bind(with(kContracting, "ragged_dot_dimension_numbers", upstream)).key() ==
        ragged_dot_op().bind(kContracting).key());
  // The default form stays out of the canonical args, so existing cache keys hold.
  const json plain = {
      {"lhs", "bf16[40,32]"}, {"rhs", "bf16[3,32,24]"}, {"group_sizes", {10, 0, 25}}};
  CHECK(ragged_dot_op().bind(with(plain, "ragged_dot_dimension_numbers", "default")).key() ==
        ragged_dot_op().bind(plain).key());
  const BoundArgs contracting = ragged_dot_op().bind(kContracting);
  CHECK(ragged_dot_op().outputs(contracting).at(0).spec == TensorSpec{DType::kBF16, {3, 20, 12}});
  CHECK(ragged_dot_op().outputs(ragged_dot_op().bind(kTrans)).at(0).spec ==
        TensorSpec{DType::kBF16, {40, 24}});
  CHECK(ragged_dot_op().flops(contracting) == 2.0 * 45 * 20 * 12);

  const std::vector<std::pair<json, std::string>> bad = {
      {with(kTrans, "ragged_dot_dimension_numbers", "transposed"), "ragged_dot_dimension_numbers"},
      {with(kTrans, "ragged_dot_dimension_numbers", 3), "ragged_dot_dimension_numbers"},
      {with(kTrans, "rhs", "bf16[3,32,24]"), "rhs"},  // K is rhs's last extent here
      {with(kTrans, "rhs", "bf16[24,32]"), "rhs"},
      {with(kTrans, "rhs_bias", "f32[3,24]"), "rhs_bias"},
      {with(kTrans, "fuse_gateup_activation", "silu"), "fuse_gateup_activation"},
      {with(kTrans, "group_offset", 1), "group_offset"},
      {with(kTrans, "precision", "highest"), "precision"},
      {with(kTrans, "zero_initialize", false), "zero_initialize"},
      {with(kContracting, "rhs", "bf16[49,12]"), "rhs"},
      {with(kContracting, "rhs", "bf16[3,50,12]"), "rhs"},
      {with(kContracting, "group_sizes", {30, 30}), "group_sizes"},  // 60 rows of K > 50
      {with(kContracting, "group_sizes", json::array()), "group_sizes"},
      {with(kContracting, "group_sizes", nullptr), "group_sizes"},  // no groups to infer
      {with(kContracting, "activation", "relu"), "activation"},
      {with(kContracting, "rhs", "i8[50,12]"), "rhs"},  // quantized without a scale
  };
  for (const auto& [args, field] : bad) {
    CAPTURE(args.dump());
    CHECK(bind_error_field(ragged_dot_op(), args) == field);
  }
  // {num_groups, total_size} over K.
  const BoundArgs spread = ragged_dot_op().bind(
      with(kContracting, "group_sizes", {{"num_groups", 4}, {"total_size", 50}}));
  CHECK(RaggedDotProblem::from(spread).G == 4);
  CHECK(RaggedDotProblem::from(spread).rows() == 50);
  // The VJP differentiates the default form only.
  CHECK(bind_error_field(ragged_dot_vjp_op(), with(with(kTrans, "dout", "bf16[40,24]"),
                                                   "preferred_element_type", "bf16")) ==
        "ragged_dot_dimension_numbers");
}

TEST_CASE("ragged_dot_general computes hand-checked products", "[ragged_dot]") {
  // trans_rhs: rhs[g] stored [N, K]. Two groups of one row; K = 2, N = 2; a third row outside.
  const Tensor lhs = tensor_of<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor rhs_t = tensor_of<float>({2, 2, 2}, {1, 0, 0, 1, 2, 1, -1, 3});
  const Tensor sizes = tensor_of<int32_t>({2}, {1, 1});
  // ragged_contracting: lhs [K = 3, M = 2], rhs [K = 3, N = 1]; groups of K: {2, 1}.
  const Tensor lhs_c = tensor_of<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor rhs_c = tensor_of<float>({3, 1}, {1, -1, 2});
  const Tensor sizes_c = tensor_of<int32_t>({2}, {2, 1});
  for (const char* impl : {"reference", "cpu"}) {
    CAPTURE(impl);
    RaggedDotOptions options;
    options.implementation = impl;
    const Tensor t = ragged_dot_general(lhs, rhs_t, sizes, RaggedDims::kTransRhs, options);
    CHECK(row_of<float>(t, 0, 2) == std::vector<float>{1, 2});  // [1 2] . I
    CHECK(row_of<float>(t, 1, 2) == std::vector<float>{2 * 3 + 4, -3 + 3 * 4});
    CHECK(row_of<float>(t, 2, 2) == std::vector<float>{0, 0});  // outside the groups
    const Tensor c =
        ragged_dot_general(lhs_c, rhs_c, sizes_c, RaggedDims::kRaggedContracting, options);
    REQUIRE(c.spec() == TensorSpec{DType::kF32, {2, 2, 1}});
    // group 0: rows 0-1 of K: [1*1 + 3*-1, 2*1 + 4*-1]; group 1: row 2: [5*2, 6*2].
    CHECK(row_of<float>(c, 0, 2) == std::vector<float>{-2, -2});
    CHECK(row_of<float>(c, 1, 2) == std::vector<float>{10, 12});
  }
  RaggedDotOptions biased;
  biased.activation = Activation::kRelu;
  CHECK_THROWS_AS(ragged_dot_general(lhs, rhs_t, sizes, RaggedDims::kTransRhs, biased),
                  InvalidArgument);
}

TEST_CASE("cpu ragged_dot trans_rhs and ragged_contracting pass the oracle on every SIMD target",
          "[ragged_dot]") {
  const std::vector<json> cases = {
      kTrans,
      kContracting,
      with(with(kTrans, "lhs", "f32[70,33]"), "rhs", "f32[3,19,33]"),
      with(with(with(kContracting, "lhs", "f16[50,21]"), "rhs", "f16[50,13]"),
           "preferred_element_type", "f32"),
      with(with(kContracting, "lhs", "f32[300,40]"), "group_sizes", {100, 150, 0, 50}),
  };
  const Implementation& cpu = ragged_dot_op().implementation("cpu");
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (json c : cases) {
      if (c["lhs"] == "f32[300,40]") c["rhs"] = "f32[300,12]";
      const BoundArgs args = ragged_dot_op().bind(c);
      const TensorMap inputs = ragged_dot_op().make_inputs(args, 9);
      json small = heuristics_config_json(cpu, args);
      small["tile_m"] = 7;                // several row tasks per group, tails of a micro-panel
      small["task_n"] = small["tile_n"];  // and column tasks where N allows
      std::vector<json> configs = {heuristics_config_json(cpu, args), small};
      for (const json& candidate : autotuning_configs_json(cpu, args)) {
        if (candidate["bf16_path"] != configs.front()["bf16_path"]) configs.push_back(candidate);
      }
      for (const json& cfg : configs) {
        CAPTURE(args.key(), cfg.dump());
        const Comparison result =
            run_against_oracle(ragged_dot_op(), "cpu", args, cfg, inputs, args, "out");
        CHECK(judge(result) == Disposition::kPassed);
      }
    }
  });
  // packing=no_pack is the default form's only.
  const BoundArgs args = ragged_dot_op().bind(kTrans);
  json no_pack = heuristics_config_json(cpu, args);
  no_pack["packing"] = "no_pack";
  CHECK_THROWS_AS(check_config_json(cpu, args, no_pack), InvalidArgument);
}

TEST_CASE("onednn ragged_dot trans_rhs and ragged_contracting pass the oracle", "[ragged_dot]") {
  const Implementation& onednn = ragged_dot_op().implementation("onednn");
  for (const json& c : {kTrans, with(kTrans, "preferred_element_type", "f32"), kContracting,
                        with(with(kContracting, "lhs", "f32[50,20]"), "rhs", "f32[50,12]")}) {
    const BoundArgs args = ragged_dot_op().bind(c);
    CAPTURE(args.key());
    try {
      check_args(onednn, args);
    } catch (const NotImplemented& e) {
      WARN("skipping: " << e.what());
      continue;
    }
    const TensorMap inputs = ragged_dot_op().make_inputs(args, 2);
    const Comparison result =
        run_against_oracle(ragged_dot_op(), "onednn", args, json::object(), inputs, args, "out");
    CHECK(judge(result) == Disposition::kPassed);
  }
}
