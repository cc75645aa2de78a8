// Tests for linear_softmax_cross_entropy_loss's `precision`: binding, the reference and cpu
// against the float64 oracle under each preset's bound, and the implementations that decline it.
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/registry.h"
#include "ops/linear_softmax_cross_entropy_loss/api.h"
#include "ops/linear_softmax_cross_entropy_loss/base.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using nlohmann::json;

namespace {

json f32_case(const std::string& precision) {
  return {
      {"x", "f32[24,96]"}, {"w", "f32[96,300]"}, {"reduction", "none"}, {"precision", precision}};
}

// Runs `impl` with `config` and compares the loss with the oracle of `bound_args`.
Comparison run_and_compare(const std::string& impl, const BoundArgs& args, const json& config,
                           const BoundArgs& bound_args) {
  const Op& op = linear_softmax_cross_entropy_loss_op();
  TensorMap inputs = op.make_inputs(args, 9);
  // Logits of O(10): x ~ N(0, 1) and w scaled up, so the rounding of each logit shows.
  Tensor& w = inputs.at("w");
  for (int64_t i = 0; i < w.num_elements(); ++i) w.set(i, w.get(i) * 4.0);
  return run_against_oracle(op, impl, args, config, inputs, bound_args, "loss");
}

}  // namespace

TEST_CASE(
    "linear_softmax_cross_entropy_loss binds precision and the gradient refuses a rounding "
    "preset",
    "[lsce][precision]") {
  const Op& op = linear_softmax_cross_entropy_loss_op();
  CHECK(op.bind(f32_case("highest")).args.at("precision") == "highest");
  CHECK(!op.bind(f32_case("default")).args.contains("precision"));
  const BoundArgs x3 = op.bind(f32_case("bf16_bf16_f32_x3"));
  CHECK(LinearSoftmaxCrossEntropyProblem::from(x3).computed().H == 3 * 96);
  CHECK(op.compute_dtype(x3) == DType::kBF16);
  try {
    op.bind(f32_case("bf16"));
    FAIL("no error");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "precision");
  }
  json vjp = f32_case("bf16_bf16_f32");
  vjp["dloss"] = "f32[24]";
  CHECK_THROWS_AS(find_op("linear_softmax_cross_entropy_loss_vjp").bind(vjp), InvalidArgument);
}

TEST_CASE(
    "linear_softmax_cross_entropy_loss's reference and cpu pass the oracle under every "
    "preset's bound",
    "[lsce][precision]") {
  const Op& op = linear_softmax_cross_entropy_loss_op();
  for (const char* precision :
       {"bf16_bf16_f32", "bf16_bf16_f32_x3", "bf16_bf16_f32_x6", "tf32_tf32_f32", "f16_f16_f32"}) {
    CAPTURE(precision);
    const BoundArgs args = op.bind(f32_case(precision));
    Comparison c = run_and_compare("reference", args, json::object(), args);
    CAPTURE(c.worst_ratio);
    REQUIRE(judge(c) == Disposition::kPassed);
    c = run_and_compare("cpu", args, heuristics_config_json(op.implementation("cpu"), args), args);
    CAPTURE(c.worst_ratio);
    REQUIRE(judge(c) == Disposition::kPassed);
  }
  testing::for_each_tile_mode([&](cpu::TileMode) {
    const BoundArgs args = op.bind(f32_case("bf16_bf16_f32_x3"));
    for (const char* path : {"native_dot", "amx"}) {
      if (std::string(path) == "native_dot" && !gemm_has_native_bf16()) continue;
      CAPTURE(path);
      json config = heuristics_config_json(op.implementation("cpu"), args);
      config["bf16_path"] = path;
      const Comparison c = run_and_compare("cpu", args, config, args);
      CAPTURE(c.worst_ratio);
      REQUIRE(judge(c) == Disposition::kPassed);
    }
  });
}

TEST_CASE("linear_softmax_cross_entropy_loss bf16_bf16_f32 fails the bound of highest",
          "[lsce][precision]") {
  const Op& op = linear_softmax_cross_entropy_loss_op();
  const Comparison c =
      run_and_compare("cpu", op.bind(f32_case("bf16_bf16_f32")), {{"bf16_path", "convert_f32"}},
                      op.bind(f32_case("highest")));
  CAPTURE(c.worst_ratio);
  CHECK(judge(c) == Disposition::kFailed);
}

TEST_CASE("linear_softmax_cross_entropy_loss's composites decline a rounding preset by name",
          "[lsce][precision][vendor]") {
  const Op& op = linear_softmax_cross_entropy_loss_op();
  const BoundArgs args = op.bind(f32_case("tf32_tf32_f32"));
  for (const char* name : {"onednn", "mkl"}) {
    const Implementation& impl = op.implementation(name);
    if (!impl.supported_on(cpu::host_device()).ok) continue;
    CAPTURE(name);
    try {
      check_args(impl, args);
      FAIL("no decline");
    } catch (const NotImplemented& e) {
      CHECK_THAT(e.what(), Catch::Contains("precision=tf32_tf32_f32"));
    }
  }
}
