// Tests for gated_linear_unit's `precision`: binding, the reference and cpu against the float64
// oracle under each preset's bound, and the implementations that decline it.
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
#include "ops/gated_linear_unit/api.h"
#include "ops/gated_linear_unit/base.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using nlohmann::json;

namespace {

json f32_case(const std::string& precision, bool fused = true) {
  json args = {{"x", "f32[2,19,72]"}, {"activation", "silu"}, {"precision", precision}};
  if (fused) {
    args["weights"] = "f32[72,2,40]";
  } else {
    args["gate_weights"] = "f32[72,40]";
    args["proj_weights"] = "f32[72,40]";
  }
  return args;
}

// Runs `impl` with `config` and compares every output with the oracle of `bound_args`.
Comparison run_and_compare(const std::string& impl, const BoundArgs& args, const json& config,
                           const BoundArgs& bound_args) {
  const Op& op = gated_linear_unit_op();
  return run_against_oracle(op, impl, args, config, op.make_inputs(args, 3), bound_args, "out");
}

}  // namespace

TEST_CASE("gated_linear_unit binds precision, widens the bound and keeps the output dtype",
          "[glu][precision]") {
  const Op& op = gated_linear_unit_op();
  CHECK(!op.bind(f32_case("default")).args.contains("precision"));
  const BoundArgs x3 = op.bind(f32_case("bf16_bf16_f32_x3"));
  const GluProblem p = GluProblem::from(x3);
  CHECK(p.computed().K == 3 * 72);
  CHECK(p.computed().x_dtype == DType::kBF16);
  CHECK(p.computed().out_dtype() == DType::kF32);
  CHECK(op.outputs(x3)[0].spec.dtype == DType::kF32);
  CHECK(op.compute_dtype(x3) == DType::kBF16);
  CHECK(op.error_model(x3).operand_roundoff == 0x1p-14);
  try {
    op.bind(f32_case("bf16_x3"));
    FAIL("no error");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "precision");
  }
  json f64 = f32_case("tf32_tf32_f32");
  f64["x"] = "f64[2,19,72]";
  f64["weights"] = "f64[72,2,40]";
  CHECK_THROWS_AS(op.bind(f64), InvalidArgument);
  // The gradient refuses a preset that rounds.
  json vjp = f32_case("bf16_bf16_f32");
  vjp["dout"] = "f32[2,19,40]";
  CHECK_THROWS_AS(find_op("gated_linear_unit_vjp").bind(vjp), InvalidArgument);
}

TEST_CASE("gated_linear_unit's reference and cpu pass the oracle under every preset's bound",
          "[glu][precision]") {
  for (const char* precision : {"f16_f16_f32", "bf16_bf16_f32", "bf16_bf16_f32_x3",
                                "bf16_bf16_f32_x6", "tf32_tf32_f32", "tf32_tf32_f32_x3"}) {
    for (bool fused : {true, false}) {
      CAPTURE(precision, fused);
      const BoundArgs args = gated_linear_unit_op().bind(f32_case(precision, fused));
      Comparison c = run_and_compare("reference", args, json::object(), args);
      CAPTURE(c.worst_ratio);
      REQUIRE(judge(c) == Disposition::kPassed);
      c = run_and_compare(
          "cpu", args, heuristics_config_json(gated_linear_unit_op().implementation("cpu"), args),
          args);
      CAPTURE(c.worst_ratio);
      REQUIRE(judge(c) == Disposition::kPassed);
    }
  }
}

TEST_CASE("gated_linear_unit's bf16 presets run on every bf16 engine, AMX emulation included",
          "[glu][precision][amx]") {
  json bf16_out = f32_case("bf16_bf16_f32_x3");
  bf16_out["x"] = "f16[2,19,72]";  // f16 x: two bf16 pieces, an f16 output
  testing::for_each_tile_mode([&](cpu::TileMode) {
    for (const json& args_json : {f32_case("bf16_bf16_f32_x3"), bf16_out}) {
      const BoundArgs args = gated_linear_unit_op().bind(args_json);
      for (const char* path : {"convert_f32", "native_dot", "amx"}) {
        if (std::string(path) == "native_dot" && !gemm_has_native_bf16()) continue;
        CAPTURE(args.key(), path);
        json config = heuristics_config_json(gated_linear_unit_op().implementation("cpu"), args);
        config["bf16_path"] = path;
        const Comparison c = run_and_compare("cpu", args, config, args);
        CAPTURE(c.worst_ratio);
        REQUIRE(judge(c) == Disposition::kPassed);
      }
    }
  });
}

TEST_CASE("gated_linear_unit bf16_bf16_f32 fails the bound of highest", "[glu][precision]") {
  const Comparison c = run_and_compare(
      "cpu", gated_linear_unit_op().bind(f32_case("bf16_bf16_f32")), {{"bf16_path", "convert_f32"}},
      gated_linear_unit_op().bind(f32_case("highest")));
  CAPTURE(c.worst_ratio);
  CHECK(judge(c) == Disposition::kFailed);
}

TEST_CASE("gated_linear_unit's composites decline a precision that rounds, naming it",
          "[glu][precision][vendor]") {
  const BoundArgs args = gated_linear_unit_op().bind(f32_case("bf16_bf16_f32_x3"));
  for (const char* name : {"onednn", "mkl"}) {
    const Implementation& impl = gated_linear_unit_op().implementation(name);
    if (!impl.supported_on(cpu::host_device()).ok) continue;
    CAPTURE(name);
    try {
      check_args(impl, args);
      FAIL("no decline");
    } catch (const NotImplemented& e) {
      CHECK_THAT(e.what(), Catch::Contains("precision=bf16_bf16_f32_x3"));
    }
  }
}
