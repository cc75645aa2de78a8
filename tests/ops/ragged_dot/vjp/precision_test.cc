// Tests for ragged_dot_vjp under upstream's precision presets (ops/ragged_dot/vjp/precision.h):
// the passes on pieces against the float64 oracle under each preset's bound, on every bf16
// engine, the bound's power to fail a rounding preset, and the vendors that decline.
#include "ops/ragged_dot/vjp/precision.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/framework/errors.h"
#include "ops/ragged_dot/vjp/api.h"
#include "ops/registry.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using nlohmann::json;

namespace {

const Op& vjp() { return find_op("ragged_dot_vjp"); }

// Empty groups, odd sizes, rows past the sum (65 of 70 rows grouped).
json vjp_case(const std::string& precision, const std::string& dtype = "f32") {
  return {
      {"lhs", dtype + "[70,96]"},   {"rhs", dtype + "[3,96,40]"},      {"dout", "f32[70,40]"},
      {"group_sizes", {21, 0, 44}}, {"preferred_element_type", "f32"}, {"precision", precision}};
}

// Both gradients of `impl` with `config` against the oracle of `bound_args`; the worse one.
Comparison run_both(const std::string& impl, const BoundArgs& args, const json& config,
                    const BoundArgs& bound_args) {
  const TensorMap inputs = vjp().make_inputs(args, 9);
  Comparison worst;
  for (const char* output : {"dlhs", "drhs"}) {
    const Comparison c = run_against_oracle(vjp(), impl, args, config, inputs, bound_args, output);
    if (judge(c) == Disposition::kFailed || c.worst_ratio > worst.worst_ratio) worst = c;
  }
  return worst;
}

}  // namespace

TEST_CASE("ragged_dot_vjp runs every preset within its bound, on the reference and cpu",
          "[ragged_dot][precision]") {
  for (const char* precision :
       {"f16_f16_f32", "bf16_bf16_f32", "bf16_bf16_f32_x3", "bf16_bf16_f32_x6", "bf16_bf16_f32_x9",
        "tf32_tf32_f32", "tf32_tf32_f32_x3", "f32_f32_f32", "highest"}) {
    CAPTURE(precision);
    const BoundArgs args = vjp().bind(vjp_case(precision));
    Comparison c = run_both("reference", args, json::object(), args);
    CAPTURE(c.worst_ratio);
    REQUIRE(judge(c) == Disposition::kPassed);
    c = run_both("cpu", args,
                 heuristics_config_json(vjp().implementation("cpu"), args, cpu::host_device()),
                 args);
    CAPTURE(c.worst_ratio);
    REQUIRE(judge(c) == Disposition::kPassed);
  }
}

TEST_CASE("ragged_dot_vjp's bf16 presets run on every bf16 engine, the tiles emulated",
          "[ragged_dot][precision][amx]") {
  std::vector<std::string> paths = {"convert_f32"};
  if (gemm_has_native_bf16()) paths.push_back("native_dot");
  testing::for_each_tile_mode([&](cpu::TileMode) {
    std::vector<std::string> all = paths;
    all.push_back("amx");
    for (const std::string& path : all) {
      for (const char* precision : {"bf16_bf16_f32", "bf16_bf16_f32_x3"}) {
        CAPTURE(path, precision);
        const BoundArgs args = vjp().bind(vjp_case(precision));
        json config = heuristics_config_json(vjp().implementation("cpu"), args, cpu::host_device());
        config["bf16_path"] = path;
        const Comparison c = run_both("cpu", args, config, args);
        CAPTURE(c.worst_ratio);
        REQUIRE(judge(c) == Disposition::kPassed);
      }
    }
  });
}

TEST_CASE("ragged_dot_vjp under bf16_bf16_f32 really rounds: it fails highest's bound",
          "[ragged_dot][precision]") {
  const BoundArgs rounded = vjp().bind(vjp_case("bf16_bf16_f32"));
  const BoundArgs highest = vjp().bind(vjp_case("highest"));
  for (const char* impl : {"reference", "cpu"}) {
    CAPTURE(impl);
    const json config =
        std::string(impl) == "cpu"
            ? heuristics_config_json(vjp().implementation("cpu"), rounded, cpu::host_device())
            : json::object();
    const Comparison c = run_both(impl, rounded, config, highest);
    CAPTURE(c.worst_ratio);
    CHECK(judge(c) == Disposition::kFailed);
    CHECK(c.worst_ratio > 10);
  }
}

TEST_CASE("ragged_dot_vjp's passes: one per pair, on pieces, with f32 gradients",
          "[ragged_dot][precision]") {
  const RaggedDotVjpProblem x3 =
      RaggedDotVjpProblem::from(vjp().bind(vjp_case("bf16_bf16_f32_x3")));
  CHECK(vjp_precision_rounds(x3));
  CHECK(vjp_precision_plan(x3).passes() == 3);
  const RaggedDotVjpProblem computed = vjp_computed(x3);
  CHECK(computed.fwd.lhs_dtype == DType::kBF16);
  CHECK(computed.dout_dtype == DType::kBF16);
  CHECK(computed.dlhs_dtype == DType::kF32);
  CHECK(computed.fwd.precision == DotPrecision::kDefault);
  // bf16 operands and cotangent under bf16_bf16_f32 change nothing: one plain run.
  json bf16 = vjp_case("bf16_bf16_f32", "bf16");
  bf16["dout"] = "bf16[70,40]";
  bf16["preferred_element_type"] = "bf16";
  const RaggedDotVjpProblem kept = RaggedDotVjpProblem::from(vjp().bind(bf16));
  CHECK_FALSE(vjp_precision_rounds(kept));
  // An f32 cotangent of bf16 operands still rounds.
  bf16["dout"] = "f32[70,40]";
  bf16["preferred_element_type"] = "f32";
  CHECK(vjp_precision_rounds(RaggedDotVjpProblem::from(vjp().bind(bf16))));
  // f64 cannot take a preset: exit 2, naming the field.
  json f64 = vjp_case("tf32_tf32_f32", "f64");
  f64["dout"] = "f64[70,40]";
  f64["preferred_element_type"] = "f64";
  try {
    vjp().bind(f64);
    FAIL("no error");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "precision");
  }
}

TEST_CASE("ragged_dot_vjp's vendors decline a rounding preset, naming it",
          "[ragged_dot][precision][vendor]") {
  const BoundArgs args = vjp().bind(vjp_case("bf16_bf16_f32_x3"));
  for (const char* impl : {"onednn", "cublas"}) {
    CAPTURE(impl);
    try {
      check_args(vjp().implementation(impl), args);
      FAIL("no error");
    } catch (const NotImplemented& e) {
      CHECK_THAT(e.what(), Catch::Contains("precision=bf16_bf16_f32_x3"));
    }
  }
}
