// Tests for the cpu layer_norm_vjp implementation against the oracle and the reference, and its
// configs.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/simd_target.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/layer_norm/vjp/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/layer_norm/vjp/cases.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const Implementation& cpu_impl() { return layer_norm_vjp_op().implementation("cpu"); }

// Runs cpu with `config` (outputs pre-filled with NaN: every element must be written) and checks
// every gradient against the float64 oracle under the error model, and against the reference:
// both within the bound of the oracle, so within twice the bound of each other.
void check_cpu(const BoundArgs& args, const TensorMap& inputs, const json& config) {
  CAPTURE(args.key(), config.dump());
  const LayerNormVjpOp& op = layer_norm_vjp_op();
  TensorMap outputs = op.allocate_outputs(args);
  for (auto& [name, t] : outputs) {
    for (int64_t i = 0; i < t.num_elements(); ++i) t.set(i, std::nan(""));
  }
  check_config_json(cpu_impl(), args, config);
  run_json(cpu_impl(), args, config, inputs, outputs);
  check_vjp_passes(args, inputs, outputs);

  TensorMap reference = op.allocate_outputs(args);
  run_json(op.implementation("reference"), args, json::object(), inputs, reference);
  const ErrorModel model = op.error_model(args);
  for (const TensorDecl& decl : op.outputs(args)) {
    const Tensor& out = outputs.at(decl.name);
    std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
    for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<int64_t>(i);
    const OracleSample oracle = op.oracle(args, inputs, decl.name, index);
    require_within_twice_the_bound(decl.name, out, reference.at(decl.name), oracle, model);
  }
}

void check_cpu(const BoundArgs& args, const json& config) {
  check_cpu(args, layer_norm_vjp_op().make_inputs(args, 11), config);
}

}  // namespace

TEST_CASE("cpu layer_norm_vjp matches the oracle and the reference with its heuristics",
          "[layer_norm_vjp]") {
  INFO("SIMD target: " << cpu::simd_target_name());
  for (const json& args_json : layer_norm_vjp_cases()) {
    const BoundArgs args = layer_norm_vjp_op().bind(args_json);
    check_cpu(args, heuristics_config_json(cpu_impl(), args, cpu::host_device()));
  }
}

TEST_CASE("cpu layer_norm_vjp is right for every task split, inner block and thread count",
          "[layer_norm_vjp]") {
  // inner_block 1 (all scalar columns), 5 (partial vectors), 16, 48, larger than I; one row or
  // three units per task; one thread and all threads (per-thread partial sums of dscale and
  // doffset); ordinary and non-temporal stores; exact and native bf16 rounding.
  for (const json& args_json : layer_norm_vjp_cases()) {
    const BoundArgs args = layer_norm_vjp_op().bind(args_json);
    for (const json& config :
         {json{{"rows_per_task", 1}, {"inner_block", 1}},
          json{
              {"rows_per_task", 3}, {"inner_block", 5}, {"num_threads", 1}, {"native_bf16", false}},
          json{{"rows_per_task", 2}, {"inner_block", 16}, {"stream_stores", true}},
          json{{"rows_per_task", 1000}, {"inner_block", 48}},
          json{{"inner_block", 4096}, {"num_threads", 2}, {"stream_stores", true}}}) {
      check_cpu(args, config);
    }
  }
}

TEST_CASE("cpu layer_norm_vjp sums a block's rows in groups and then the rest",
          "[layer_norm_vjp]") {
  // Non-last axes sum kRowSums (4) rows of a block at a time, then the last C % 4 one by one:
  // C = 2, 3 (no full group), 5, 23 (groups and 1 or 3 rows left); 40 columns take bf16 pairs,
  // a single vector and scalar columns; layer norm and RMSNorm.
  for (const int64_t C : {2, 3, 5, 23}) {
    for (const std::string dtype : {"bf16", "f16", "f32"}) {
      for (const bool subtract_mean : {true, false}) {
        const std::string x = dtype + "[2," + std::to_string(C) + ",40]";
        const std::string params = "f32[" + std::to_string(C) + "]";
        json args_json{{"x", x},
                       {"dout", x},
                       {"axis", 1},
                       {"scale", params},
                       {"subtract_mean", subtract_mean}};
        if (subtract_mean) args_json["offset"] = params;
        INFO(args_json.dump());
        const BoundArgs args = layer_norm_vjp_op().bind(args_json);
        for (const int inner_block : {40, 16}) {
          check_cpu(args, json{{"inner_block", inner_block}, {"rows_per_task", 2}});
        }
      }
    }
  }
}

TEST_CASE("cpu layer_norm_vjp pipelines the last axis's row groups and their tails",
          "[layer_norm_vjp]") {
  // The last axis reads each group of 4 rows during the previous group's output pass: 1 row (no
  // group), 4 (one group, nothing to read ahead), 5 and 23 (groups, then 1 or 3 rows alone), 41
  // rows; one task or tasks of 5 rows (a group and a row each, the prefetch aimed past the task);
  // C = 64 (bf16 pairs on AVX-512 and AVX2), 40 and 100 (a partial last vector), 16.
  for (const int64_t rows : {1, 4, 5, 23, 41}) {
    for (const int64_t C : {64, 40, 100, 16}) {
      for (const std::string dtype : {"bf16", "f16", "f32"}) {
        for (const bool subtract_mean : {true, false}) {
          const std::string x = dtype + "[" + std::to_string(rows) + "," + std::to_string(C) + "]";
          const std::string params = "f32[" + std::to_string(C) + "]";
          json args_json{
              {"x", x}, {"dout", x}, {"scale", params}, {"subtract_mean", subtract_mean}};
          if (subtract_mean) args_json["offset"] = params;
          INFO(args_json.dump());
          const BoundArgs args = layer_norm_vjp_op().bind(args_json);
          for (const json& config : {json{{"rows_per_task", 1000}, {"stream_stores", true}},
                                     json{{"rows_per_task", 5}, {"num_threads", 1}}}) {
            check_cpu(args, config);
          }
        }
      }
    }
  }
}

TEST_CASE("cpu layer_norm_vjp survives a far mean and many rows", "[layer_norm_vjp]") {
  // x = 1e4 + N (f32) or 200 + N (bf16): the two-pass statistics keep the variance; many rows
  // (dscale and doffset sum 4096 terms) split over threads.
  for (const json& args_json :
       {json{{"x", "f32[64,2,40]"}, {"axis", 0}, {"scale", "f32[64]"}, {"offset", "f32[64]"}},
        json{{"x", "bf16[4096,96]"}, {"scale", "f32[96]"}, {"offset", "f32[96]"}},
        json{{"x", "f32[3,64,50]"}, {"axis", 1}, {"offset", "f32[64]"}},
        json{{"x", "bf16[8,2050]"}, {"scale", "f32[2050]"}}}) {
    json vjp_args = args_json;
    vjp_args["dout"] = args_json.at("x");
    const BoundArgs args = layer_norm_vjp_op().bind(vjp_args);
    TensorMap inputs = layer_norm_vjp_op().make_inputs(args, 5);
    Tensor& x = inputs.at("x");
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      x.set(i, x.get(i) + (x.dtype() == DType::kF32 ? 1e4 : 200.0));
    }
    for (const json& config : {json{{"inner_block", 16}, {"rows_per_task", 2}},
                               json{{"inner_block", 64}, {"num_threads", 1}}}) {
      check_cpu(args, inputs, config);
    }
  }
}

TEST_CASE("cpu layer_norm_vjp matches the oracle on every SIMD target of this CPU",
          "[layer_norm_vjp]") {
  for_each_forced_target({HWY_AVX2, HWY_SCALAR}, [](int64_t target) {
    REQUIRE(std::string(cpu::simd_target_name()) == hwy::TargetName(target));
    for (const json& args_json : layer_norm_vjp_cases()) {
      const BoundArgs args = layer_norm_vjp_op().bind(args_json);
      check_cpu(args, heuristics_config_json(cpu_impl(), args, cpu::host_device()));
      check_cpu(args, json{{"rows_per_task", 16}, {"inner_block", 24}});
    }
  });
}

TEST_CASE("cpu layer_norm_vjp autotuning configs are valid and right", "[layer_norm_vjp]") {
  for (const json& args_json :
       {json{{"x", "bf16[64,64]"},
             {"dout", "bf16[64,64]"},
             {"scale", "f32[64]"},
             {"offset", "f32[64]"}},
        json{
            {"x", "bf16[32,24,24]"}, {"dout", "bf16[32,24,24]"}, {"axis", 0}, {"scale", "f32[32]"}},
        json{{"x", "f32[3,20,100]"},
             {"dout", "f32[3,20,100]"},
             {"axis", 1},
             {"subtract_mean", false}}}) {
    const BoundArgs args = layer_norm_vjp_op().bind(args_json);
    const std::vector<json> configs = autotuning_configs_json(cpu_impl(), args, cpu::host_device());
    REQUIRE(configs.size() >= 2);
    CHECK(configs[0] == heuristics_config_json(cpu_impl(), args, cpu::host_device()));
    for (const json& config : configs) check_cpu(args, config);
  }
}

TEST_CASE("cpu layer_norm_vjp config errors name the field, f64 goes to the reference",
          "[layer_norm_vjp]") {
  auto field = [](const json& config) -> std::string {
    try {
      cpu_impl().canonical_config(config);
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return "<no error>";
  };
  CHECK(field({{"rows_per_task", 8}, {"inner_block", 64}, {"num_threads", 1}}) == "<no error>");
  CHECK(field({{"rows_per_task", 0}}) == "rows_per_task");
  CHECK(field({{"inner_block", -3}}) == "inner_block");
  CHECK(field({{"num_threads", -1}}) == "num_threads");
  CHECK(field({{"tile", 4}}) == "tile");
  const BoundArgs args = layer_norm_vjp_op().bind({{"x", "f64[4,8]"}, {"dout", "f64[4,8]"}});
  try {
    check_args(cpu_impl(), args);
    FAIL("expected NotImplemented");
  } catch (const NotImplemented& e) {
    CHECK_THAT(e.what(), Catch::Contains("f64"));
  }
}

TEST_CASE("tokamax::layer_norm_vjp runs auto and named implementations within the bound",
          "[layer_norm_vjp]") {
  const LayerNormVjpOp& op = layer_norm_vjp_op();
  const BoundArgs args = op.bind({{"x", "bf16[12,40,24]"},
                                  {"dout", "bf16[12,40,24]"},
                                  {"axis", 1},
                                  {"scale", "f32[40]"},
                                  {"offset", "f32[40]"}});
  const TensorMap inputs = op.make_inputs(args, 2);
  for (const std::string impl : {"auto", "cpu", "reference"}) {
    CAPTURE(impl);
    LayerNormOptions options;
    options.implementation = impl;
    options.axis = -2;
    const LayerNormGradients grads = layer_norm_vjp(
        inputs.at("x"), &inputs.at("scale"), &inputs.at("offset"), inputs.at("dout"), options);
    REQUIRE(grads.dscale.has_value());
    REQUIRE(grads.doffset.has_value());
    TensorMap outputs = {{"dx", grads.dx}, {"dscale", *grads.dscale}, {"doffset", *grads.doffset}};
    check_vjp_passes(args, inputs, outputs);
  }
  const Tensor x(TensorSpec{DType::kF32, {4, 8}});
  const Tensor wrong(TensorSpec{DType::kF32, {4, 9}});
  try {
    layer_norm_vjp(x, nullptr, nullptr, wrong);
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "dout");
  }
}
