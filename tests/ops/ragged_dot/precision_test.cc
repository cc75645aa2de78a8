// Tests for ragged_dot's `precision`: binding, the error model, the reference and cpu against the
// float64 oracle under each preset's bound, and the vendors that decline it.
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "ops/common/cpu_gemm/checks.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/ragged_dot/api.h"
#include "ops/ragged_dot/base.h"
#include "ops/registry.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/tile_modes.h"

using namespace tokamax;
using nlohmann::json;

namespace {

const char* const kPresets[] = {"f16_f16_f32",      "bf16_bf16_f32",    "bf16_bf16_f32_x3",
                                "bf16_bf16_f32_x6", "bf16_bf16_f32_x9", "tf32_tf32_f32",
                                "tf32_tf32_f32_x3", "f32_f32_f32",      "highest"};

json f32_case(const std::string& precision) {
  return {{"lhs", "f32[70,96]"},
          {"rhs", "f32[3,96,40]"},
          {"group_sizes", {21, 0, 44}},
          {"precision", precision}};
}

// Runs `impl` with `config` on `args` and compares every output with the oracle of `bound_args`
// (the same problem, possibly another precision: whose bound applies).
Comparison run_and_compare(const std::string& impl, const BoundArgs& args, const json& config,
                           const BoundArgs& bound_args) {
  return run_against_oracle(ragged_dot_op(), impl, args, config,
                            ragged_dot_op().make_inputs(args, 5), bound_args, "out");
}

}  // namespace

TEST_CASE(
    "ragged_dot binds precision by upstream's names, leaves default out of the key and "
    "rejects presets its operands cannot take",
    "[ragged_dot][precision]") {
  const RaggedDotOp& op = ragged_dot_op();
  const BoundArgs plain = op.bind(f32_case("default"));
  CHECK(!plain.args.contains("precision"));
  const BoundArgs x3 = op.bind(f32_case("BF16_BF16_F32_X3"));
  CHECK(x3.args.at("precision") == "bf16_bf16_f32_x3");
  CHECK(x3.key() != plain.key());
  CHECK(RaggedDotProblem::from(x3).computed().K == 3 * 96);
  CHECK(RaggedDotProblem::from(x3).computed().lhs_dtype == DType::kBF16);
  CHECK(op.compute_dtype(x3) == DType::kBF16);
  // The bound widens with the preset: P K terms and the operands' rounding.
  CHECK(op.error_model(x3).accumulation_length > 3 * 96);
  CHECK(op.error_model(x3).operand_roundoff == 0x1p-14);
  CHECK(op.error_model(plain).operand_roundoff == 0.0);
  // bf16 operands lose nothing to a bf16 preset: the kernels run as without it.
  const BoundArgs bf16 =
      op.bind({{"lhs", "bf16[8,16]"}, {"rhs", "bf16[1,16,16]"}, {"precision", "bf16_bf16_f32_x6"}});
  CHECK(RaggedDotProblem::from(bf16).computed().K == 16);
  CHECK(op.error_model(bf16).operand_roundoff == 0.0);

  // An operand the preset keeps is used as given, not copied (a bf16 rhs under bf16_bf16_f32).
  const BoundArgs kept =
      op.bind({{"lhs", "f32[8,16]"}, {"rhs", "bf16[1,16,16]"}, {"precision", "bf16_bf16_f32"}});
  const TensorMap kept_inputs = op.make_inputs(kept, 1);
  const TensorMap kept_expanded =
      expand_precision_operands(RaggedDotProblem::from(kept), kept_inputs);
  CHECK(kept_expanded.at("rhs").raw() == kept_inputs.at("rhs").raw());
  CHECK(kept_expanded.at("lhs").dtype() == DType::kBF16);
  CHECK(RaggedDotProblem::from(kept).computed().rhs_dtype == DType::kBF16);

  auto rejects = [&](json args, const std::string& needle) {
    try {
      op.bind(args);
      FAIL("no error for " << args.dump());
    } catch (const InvalidArgument& e) {
      CHECK(e.field() == "precision");
      CHECK_THAT(e.what(), Catch::Contains(needle));
    }
  };
  rejects(f32_case("bf16x3"), "bf16_bf16_f32_x3");
  rejects({{"lhs", "f32[4,8]"}, {"rhs", "f32[1,8,4]"}, {"precision", 3}}, "a name");
  rejects({{"lhs", "f64[4,8]"}, {"rhs", "f64[1,8,4]"}, {"precision", "tf32_tf32_f32"}}, "f64");
  rejects({{"lhs", "bf16[4,8]"},
           {"rhs", "i8[1,8,4]"},
           {"rhs_scale", "f32[1,4]"},
           {"precision", "bf16_bf16_f32"}},
          "i8");
  // The gradient takes the forward's presets (tests/ops/ragged_dot/vjp/precision_test.cc).
  const Op& vjp = find_op("ragged_dot_vjp");
  json vjp_args = f32_case("bf16_bf16_f32");
  vjp_args["dout"] = "f32[70,40]";
  CHECK(vjp.bind(vjp_args).args.at("precision") == "bf16_bf16_f32");
  vjp_args["precision"] = "highest";
  CHECK(vjp.bind(vjp_args).args.at("precision") == "highest");
}

TEST_CASE("ragged_dot's reference and cpu pass the oracle under every preset's bound",
          "[ragged_dot][precision]") {
  for (const char* precision : kPresets) {
    CAPTURE(precision);
    const BoundArgs args = ragged_dot_op().bind(f32_case(precision));
    Comparison c = run_and_compare("reference", args, json::object(), args);
    CAPTURE(c.worst_ratio);
    REQUIRE(judge(c) == Disposition::kPassed);
    c = run_and_compare("cpu", args,
                        heuristics_config_json(ragged_dot_op().implementation("cpu"), args), args);
    CAPTURE(c.worst_ratio);
    REQUIRE(judge(c) == Disposition::kPassed);
  }
}

TEST_CASE("ragged_dot's bf16 presets run on every bf16 engine, the AMX tiles' emulation included",
          "[ragged_dot][precision][amx]") {
  // Mixed operands too (a bf16 lhs needs one piece), an epilogue, and mixed output types.
  const std::vector<json> cases = {
      f32_case("bf16_bf16_f32_x3"),
      {{"lhs", "bf16[33,40]"},
       {"rhs", "f32[2,40,48]"},
       {"group_sizes", {20, 13}},
       {"precision", "bf16_bf16_f32_x6"},
       {"fuse_gateup_activation", "silu"}},
      {{"lhs", "f16[30,24]"},
       {"rhs", "f16[2,24,32]"},
       {"group_sizes", {11, 19}},
       {"precision", "bf16_bf16_f32"},
       {"preferred_element_type", "f32"}},
  };
  testing::for_each_tile_mode([&](cpu::TileMode) {
    for (const json& args_json : cases) {
      const BoundArgs args = ragged_dot_op().bind(args_json);
      for (const char* path : {"convert_f32", "native_dot", "amx"}) {
        if (std::string(path) == "native_dot" && !gemm_has_native_bf16()) continue;
        CAPTURE(args.key(), path);
        json config = heuristics_config_json(ragged_dot_op().implementation("cpu"), args);
        config["bf16_path"] = path;
        config["packing"] = "packed";
        const Comparison c = run_and_compare("cpu", args, config, args);
        CAPTURE(c.worst_ratio);
        REQUIRE(judge(c) == Disposition::kPassed);
      }
    }
  });
}

TEST_CASE("ragged_dot bf16_bf16_f32 fails the bound of highest, which _x6 meets",
          "[ragged_dot][precision]") {
  const BoundArgs highest = ragged_dot_op().bind(f32_case("highest"));
  const json config = {{"bf16_path", "convert_f32"}};
  const Comparison one_pass =
      run_and_compare("cpu", ragged_dot_op().bind(f32_case("bf16_bf16_f32")), config, highest);
  CAPTURE(one_pass.worst_ratio);
  CHECK(judge(one_pass) == Disposition::kFailed);
  CHECK(one_pass.worst_ratio > 10.0);
  // Six bf16 products reach f32's accuracy: within a few times highest's bound.
  const Comparison six =
      run_and_compare("cpu", ragged_dot_op().bind(f32_case("bf16_bf16_f32_x6")), config, highest);
  CHECK(six.worst_ratio < 4.0);
}

TEST_CASE("ragged_dot mkl runs the presets as its gemms on the pieces",
          "[ragged_dot][precision][vendor][mkl]") {
  const Implementation& mkl = ragged_dot_op().implementation("mkl");
  const Support support = mkl.supported_on(cpu::host_device());
  if (!support.ok) {
    WARN("skipping mkl: " << support.reason);
    return;
  }
  for (const char* precision : {"bf16_bf16_f32", "bf16_bf16_f32_x3", "tf32_tf32_f32"}) {
    for (const json& config : {json::object(), json{{"num_threads", 1}}}) {
      CAPTURE(precision, config.dump());
      const BoundArgs args = ragged_dot_op().bind(f32_case(precision));
      const Comparison c = run_and_compare("mkl", args, config, args);
      CAPTURE(c.worst_ratio);
      REQUIRE(judge(c) == Disposition::kPassed);
    }
  }
  // bf16_bf16_f32 really rounds: it fails highest's bound.
  const Comparison rounded =
      run_and_compare("mkl", ragged_dot_op().bind(f32_case("bf16_bf16_f32")), json::object(),
                      ragged_dot_op().bind(f32_case("highest")));
  CHECK(judge(rounded) == Disposition::kFailed);
  // f16 pieces: MKL's BLAS baseline wires f32 and bf16 only.
  CHECK_THROWS_AS(check_args(mkl, ragged_dot_op().bind(f32_case("f16_f16_f32"))), NotImplemented);
}

TEST_CASE("ragged_dot vendors decline a precision that changes the operands, naming it",
          "[ragged_dot][precision][vendor]") {
  const BoundArgs args = ragged_dot_op().bind(f32_case("bf16_bf16_f32_x3"));
  for (const char* name : {"openblas", "onednn", "cublas", "cuda"}) {
    CAPTURE(name);
    try {
      check_args(ragged_dot_op().implementation(name), args);
      FAIL("no decline");
    } catch (const NotImplemented& e) {
      // A library that cannot run here says so first; one that can names the argument.
      const std::string what = e.what();
      const bool names_it = what.find("precision=bf16_bf16_f32_x3") != std::string::npos;
      if (!names_it) WARN(name << " declined for another reason: " << what);
      if (ragged_dot_op().implementation(name).supported_on(cpu::host_device()).ok) {
        CHECK(names_it);
      }
    }
  }
  // The same precision on bf16 operands changes nothing: the vendors run it.
  const BoundArgs bf16 = ragged_dot_op().bind(
      {{"lhs", "bf16[8,16]"}, {"rhs", "bf16[1,16,16]"}, {"precision", "bf16_bf16_f32_x3"}});
  CHECK(RaggedDotProblem::from(bf16).extended_arguments().empty());
}

TEST_CASE("ragged_dot's C++ API carries precision", "[ragged_dot][precision]") {
  const BoundArgs args = ragged_dot_op().bind(f32_case("bf16_bf16_f32"));
  const TensorMap inputs = ragged_dot_op().make_inputs(args, 5);
  RaggedDotOptions options;
  options.implementation = "reference";
  const Tensor plain =
      ragged_dot(inputs.at("lhs"), inputs.at("rhs"), inputs.at("group_sizes"), options);
  options.precision = DotPrecision::kBf16Bf16F32;
  const Tensor rounded =
      ragged_dot(inputs.at("lhs"), inputs.at("rhs"), inputs.at("group_sizes"), options);
  TensorMap outputs = ragged_dot_op().allocate_outputs(args);
  run_json(ragged_dot_op().implementation("reference"), args, json::object(), inputs, outputs);
  bool differs = false;
  for (int64_t i = 0; i < rounded.num_elements(); ++i) {
    REQUIRE(rounded.get(i) == outputs.at("out").get(i));
    differs = differs || rounded.get(i) != plain.get(i);
  }
  CHECK(differs);
}
