// Tests for the vendor baselines of gated_linear_unit ("onednn", "mkl": the same composite around
// each library's matmul) against the float64 oracle.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/gated_linear_unit/api.h"
#include "tests/ops/gated_linear_unit/glu_test_util.h"
#include "tests/ops/impl_calls.h"

using namespace tokamax;
using nlohmann::json;

namespace {

const Implementation& vendor(const std::string& name) {
  return gated_linear_unit_op().implementation(name);
}

// The vendor baselines that can run here (oneMKL needs its unpacked wheel; a missing one skips).
std::vector<std::string> vendors() {
  std::vector<std::string> names;
  for (const std::string name : {"onednn", "mkl"}) {
    const Support support = vendor(name).supported_on(cpu::host_device());
    if (support.ok) {
      names.push_back(name);
    } else {
      WARN("skipping " << name << ": " << support.reason);
    }
  }
  return names;
}

// True when `args` can run on `name` here; otherwise says why (a missing dtype skips).
bool runs(const std::string& name, const BoundArgs& args) {
  try {
    check_args(vendor(name), args);
  } catch (const NotImplemented& e) {
    WARN("skipping " << name << " for " << args.key() << ": " << e.what());
    return false;
  }
  return true;
}

}  // namespace

TEST_CASE("vendor gated_linear_unit composites match the oracle", "[glu][mkl]") {
  REQUIRE(vendor("onednn").supported_on(cpu::host_device()).ok);
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  for (const std::string& name : vendors()) {
    for (const json& args_json :
         {json{{"x", "f32[2,24,40]"}, {"weights", "f32[40,2,48]"}, {"activation", "silu"}},
          json{{"x", "f32[131,97]"}, {"weights", "f32[97,2,75]"}, {"activation", "gelu_tanh"}},
          json{{"x", "f32[40,1]"}, {"weights", "f32[1,2,33]"}, {"activation", "relu"}},
          json{{"x", "f32[7,0]"}, {"weights", "f32[0,2,5]"}, {"activation", "sigmoid"}},
          json{{"x", "bf16[37,64]"}, {"weights", "bf16[64,2,40]"}, {"activation", "gelu"}},
          json{{"x", "bf16[5,29,53]"}, {"weights", "bf16[53,2,67]"}, {"activation", "none"}}}) {
      CAPTURE(name, args_json.dump());
      const BoundArgs args = op.bind(args_json);
      if (!runs(name, args)) continue;
      const TensorMap inputs = op.make_inputs(args, 9);
      TensorMap outputs = op.allocate_outputs(args);
      Tensor& out = outputs.at("out");
      for (int64_t i = 0; i < out.num_elements(); ++i) out.set(i, std::nan(""));
      // Twice: the second call reuses the cached primitive and the intermediate buffer.
      for (int call = 0; call < 2; ++call) {
        run_json(vendor(name), args, json::object(), inputs, outputs);
        const Comparison c = glu_testing::compare_all(args, inputs, out);
        CAPTURE(call, c.max_abs_error, c.bound, c.worst_ratio);
        CHECK(c.violations == 0);
        CHECK(c.nonfinite == 0);
      }
    }
  }
}

TEST_CASE("vendor gated_linear_unit composites match the oracle over several row chunks",
          "[glu][mkl]") {
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  const BoundArgs args =
      op.bind({{"x", "f32[3,37,24]"}, {"weights", "f32[24,2,20]"}, {"activation", "gelu"}});
  for (const std::string& name : vendors()) {
    if (!runs(name, args)) continue;
    const TensorMap inputs = op.make_inputs(args, 4);
    TensorMap outputs = op.allocate_outputs(args);
    Tensor& out = outputs.at("out");
    for (int64_t i = 0; i < out.num_elements(); ++i) out.set(i, std::nan(""));
    // 40 rows per chunk: chunks of 40, 40 and a last one of 31 rows (two primitive shapes).
    run_json(vendor(name), args, {{"chunk_rows", 40}}, inputs, outputs);
    const Comparison c = glu_testing::compare_all(args, inputs, out);
    CAPTURE(name, c.max_abs_error, c.bound, c.worst_ratio, c.worst_index);
    CHECK(c.violations == 0);
    CHECK(c.nonfinite == 0);
  }
}

TEST_CASE("vendor gated_linear_unit composites say why they cannot run a dtype", "[glu][mkl]") {
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  for (const std::string& name : vendors()) {
    for (const json& args_json : {json{{"x", "f64[4,3]"}, {"weights", "f64[3,2,2]"}},
                                  json{{"x", "bf16[4,3]"}, {"weights", "f32[3,2,2]"}},
                                  json{{"x", "f16[4,3]"}, {"weights", "f16[3,2,2]"}}}) {
      CAPTURE(name, args_json.dump());
      const BoundArgs args = op.bind(args_json);
      try {
        check_args(vendor(name), args);
        FAIL("expected NotImplemented");
      } catch (const NotImplemented& e) {
        CHECK_THAT(e.what(), Catch::Contains(name));
      }
    }
  }
}
