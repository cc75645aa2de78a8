// Tests for the cpu layer_norm implementation against the oracle and the reference, and its
// configs.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/simd_target.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/layer_norm/api.h"
#include "ops/layer_norm/cpu_kernel.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/layer_norm/layer_norm_test_util.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const Implementation& cpu_impl() { return layer_norm_op().implementation("cpu"); }

// Runs cpu with `config` (output pre-filled with NaN: every element must be written) and checks
// it against the float64 oracle under the error model, and against the reference: both within
// the bound of the oracle, so within twice the bound of each other.
void check_cpu(const BoundArgs& args, const TensorMap& inputs, const json& config) {
  CAPTURE(args.key(), config.dump());
  const LayerNormOp& op = layer_norm_op();
  TensorMap outputs = op.allocate_outputs(args);
  Tensor& out = outputs.at("out");
  for (int64_t i = 0; i < out.num_elements(); ++i) out.set(i, std::nan(""));
  check_config_json(cpu_impl(), args, config);
  run_json(cpu_impl(), args, config, inputs, outputs);
  const Comparison cmp = compare_all(args, inputs, out);
  CAPTURE(cmp.max_abs_error, cmp.bound, cmp.worst_index, cmp.nonfinite);
  REQUIRE(judge(cmp) == Disposition::kPassed);

  TensorMap reference = op.allocate_outputs(args);
  run_json(op.implementation("reference"), args, json::object(), inputs, reference);
  const ErrorModel model = op.error_model(args);
  std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<int64_t>(i);
  const OracleSample oracle = op.oracle(args, inputs, "out", index);
  require_within_twice_the_bound("out", out, reference.at("out"), oracle, model);
}

void check_cpu(const BoundArgs& args, const json& config) {
  check_cpu(args, layer_norm_op().make_inputs(args, 11), config);
}

}  // namespace

TEST_CASE("cpu layer_norm matches the oracle and the reference with its heuristics",
          "[layer_norm]") {
  INFO("SIMD target: " << cpu::simd_target_name());
  for (const json& args_json : layer_norm_cases()) {
    const BoundArgs args = layer_norm_op().bind(args_json);
    check_cpu(args, heuristics_config_json(cpu_impl(), args, cpu::host_device()));
  }
}

TEST_CASE("cpu layer_norm is right for every task split and inner block", "[layer_norm]") {
  // inner_block 1 (all scalar columns), 5 (partial vectors), 16, 48, larger than I; one row or
  // three units per task; one thread and all threads; ordinary and non-temporal stores (taken
  // where C, or I and inner_block, are multiples of the vector width); the exact integer bf16
  // rounding and (where the CPU has it) vcvtneps2bf16.
  for (const json& args_json : layer_norm_cases()) {
    const BoundArgs args = layer_norm_op().bind(args_json);
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

TEST_CASE("cpu layer_norm bf16 pair kernels are right at their edges", "[layer_norm]") {
  // On every SIMD target but scalar (native rounding on AVX-512 with avx512_bf16, exact
  // elsewhere and with native_bf16 false): last axis with C a multiple of 2L (pair kernels: on
  // AVX-512 8-row groups with vectorized statistics, elsewhere RowGroup's pairs; then single
  // rows); strided axes with whole pairs of columns and a generic remainder, one and two lines
  // per pass-2 chunk, several blocks per task (the next block prefetched, across outer indices).
  INFO("SIMD target: " << cpu::simd_target_name()
                       << ", native bf16: " << layer_norm_cpu_has_native_bf16());
  for (const json& args_json :
       {json{{"x", "bf16[19,96]"}, {"scale", "f32[96]"}, {"offset", "f32[96]"}},
        json{{"x", "bf16[13,32]"}, {"scale", "f32[32]"}, {"subtract_mean", false}},
        json{{"x", "bf16[24,64,3]"}, {"axis", 0}, {"scale", "f32[24]"}, {"offset", "f32[24]"}},
        json{{"x", "bf16[2,10,96]"}, {"axis", 1}, {"scale", "f32[10]"}, {"offset", "f32[10]"}},
        json{{"x", "bf16[3,9,70]"}, {"axis", 1}, {"subtract_mean", false}}}) {
    const BoundArgs args = layer_norm_op().bind(args_json);
    for (const json& config :
         {json{{"rows_per_task", 100}, {"inner_block", 64}, {"stream_stores", true}},
          json{{"rows_per_task", 2}, {"inner_block", 96}, {"num_threads", 1}},
          json{{"rows_per_task", 3}, {"inner_block", 40}, {"stream_stores", true}},
          json{{"rows_per_task", 5}, {"inner_block", 128}, {"native_bf16", false}}}) {
      check_cpu(args, config);
    }
  }
}

TEST_CASE("cpu layer_norm one-pass statistics survive a far mean and an outlying first element",
          "[layer_norm]") {
  // The strided-axis kernels and the last-axis bf16 pair kernel take one pass of sums of
  // d = x - (the first element) and d^2: exact enough for data far from zero (x = 1e4 + N(0, 1):
  // an unshifted sum of squares would lose every digit of the variance), and a block or row
  // group whose first element lies far out falls back to two-pass sums from cache (with it at
  // 3000 and C = 2048 the shifted statistics would be off by ten times the bound). Outlying
  // columns or rows are mixed with ordinary ones in each block or group.
  for (const json& args_json :
       {json{{"x", "f32[2048,2,40]"}, {"axis", 0}, {"scale", "f32[2048]"}},
        json{{"x", "bf16[4096,96]"}, {"axis", 0}, {"scale", "f32[4096]"}, {"offset", "f32[4096]"}},
        json{{"x", "f32[3,64,50]"}, {"axis", 1}, {"offset", "f32[64]"}},
        json{{"x", "bf16[16,16384]"}, {"scale", "f32[16384]"}, {"offset", "f32[16384]"}},
        json{{"x", "bf16[40,64]"}, {"scale", "f32[64]"}},
        json{{"x", "f32[16,16390]"}, {"offset", "f32[16390]"}},
        json{{"x", "f16[24,2050]"}, {"scale", "f32[2050]"}}}) {
    const BoundArgs args = layer_norm_op().bind(args_json);
    const LayerNormProblem p = LayerNormProblem::from(args);
    for (const bool far_mean : {true, false}) {
      TensorMap inputs = layer_norm_op().make_inputs(args, 5);
      Tensor& x = inputs.at("x");
      for (int64_t o = 0; o < p.O; ++o) {
        for (int64_t c = 0; c < p.C; ++c) {
          for (int64_t i = 0; i < p.I; ++i) {
            const int64_t at = (o * p.C + c) * p.I + i;
            if (far_mean) {
              x.set(at, x.get(at) + (x.dtype() == DType::kF32 ? 1e4 : 200.0));
            } else if (c == 0 && (o + i) % 3 == 1) {
              x.set(at, 3000.0);
            }
          }
        }
      }
      CAPTURE(far_mean);
      for (const json& config :
           {json{{"inner_block", 16}, {"rows_per_task", 2}},
            json{{"inner_block", 32}, {"rows_per_task", 1}, {"stream_stores", true}},
            json{{"inner_block", 64}, {"native_bf16", false}, {"num_threads", 1}},
            json{{"rows_per_task", 16}, {"inner_block", 96}}}) {
        check_cpu(args, inputs, config);
      }
    }
  }
}

TEST_CASE("cpu layer_norm matches the oracle on every SIMD target of this CPU", "[layer_norm]") {
  // Highway dispatches to the best target; forcing the narrower ones runs the generic kernels
  // as an AVX2 or a scalar machine would, with the one-pass statistics and their fallback.
  for_each_forced_target({HWY_AVX2, HWY_SCALAR}, [](int64_t target) {
    REQUIRE(std::string(cpu::simd_target_name()) == hwy::TargetName(target));
    for (const json& args_json : layer_norm_cases()) {
      const BoundArgs args = layer_norm_op().bind(args_json);
      check_cpu(args, heuristics_config_json(cpu_impl(), args, cpu::host_device()));
      check_cpu(args, json{{"rows_per_task", 16}, {"inner_block", 24}});
    }
    // First elements far out: the fallback of both kernels.
    for (const json& args_json : {json{{"x", "f32[1024,40]"}, {"axis", 0}},
                                  json{{"x", "bf16[16,4100]"}, {"scale", "f32[4100]"}}}) {
      const BoundArgs args = layer_norm_op().bind(args_json);
      TensorMap inputs = layer_norm_op().make_inputs(args, 5);
      Tensor& x = inputs.at("x");
      const LayerNormProblem p = LayerNormProblem::from(args);
      for (int64_t o = 0; o < p.O; ++o) {
        for (int64_t i = 0; i < p.I; ++i) {
          if ((o + i) % 3 == 1) x.set(o * p.C * p.I + i, 3000.0);
        }
      }
      check_cpu(args, inputs, json{{"rows_per_task", 16}, {"inner_block", 16}});
    }
  });
}

TEST_CASE("cpu layer_norm autotuning configs are valid and right", "[layer_norm]") {
  for (const json& args_json :
       {json{{"x", "bf16[64,64]"}, {"scale", "f32[64]"}, {"offset", "f32[64]"}},
        json{{"x", "bf16[32,24,24]"}, {"axis", 0}, {"scale", "f32[32]"}},
        json{{"x", "f32[3,20,100]"}, {"axis", 1}, {"subtract_mean", false}}}) {
    const BoundArgs args = layer_norm_op().bind(args_json);
    const std::vector<json> configs = autotuning_configs_json(cpu_impl(), args, cpu::host_device());
    REQUIRE(configs.size() >= 2);
    CHECK(configs[0] == heuristics_config_json(cpu_impl(), args, cpu::host_device()));
    for (const json& config : configs) check_cpu(args, config);
  }
}

TEST_CASE("cpu layer_norm config errors name the field", "[layer_norm]") {
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
  CHECK(field({{"inner_block", "wide"}}) == "inner_block");

  const BoundArgs args = layer_norm_op().bind({{"x", "f32[4096,8,4096]"}, {"axis", 1}});
  try {
    check_config_json(cpu_impl(), args, {{"num_threads", 100000}});
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "num_threads");
  }
  const BoundArgs wide = layer_norm_op().bind({{"x", "f32[1,65536,512]"}, {"axis", 1}});
  try {
    check_config_json(cpu_impl(), wide, {{"inner_block", 512}});
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "inner_block");
  }
}

TEST_CASE("cpu layer_norm leaves f64 to the reference with a reason", "[layer_norm]") {
  const BoundArgs args = layer_norm_op().bind({{"x", "f64[4,8]"}});
  try {
    check_args(cpu_impl(), args);
    FAIL("expected NotImplemented");
  } catch (const NotImplemented& e) {
    CHECK_THAT(e.what(), Catch::Contains("f64"));
  }
}
