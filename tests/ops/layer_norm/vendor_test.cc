// Tests for the oneDNN layer_norm baseline against the oracle, and what it refuses.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"
#include "ops/layer_norm/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/layer_norm/layer_norm_test_util.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const Implementation& onednn() { return layer_norm_op().implementation("onednn"); }

// The NotImplemented message of check_args, or "" when it accepts the args.
std::string rejection(const json& args_json) {
  try {
    check_args(onednn(), layer_norm_op().bind(args_json));
  } catch (const NotImplemented& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("onednn layer_norm matches the oracle where it runs", "[layer_norm][vendor]") {
  const Support support = onednn().supported_on(cpu::host_device());
  if (!support.ok) {
    WARN("skipping onednn: " << support.reason);
    return;
  }
  int ran = 0;
  for (const json& args_json : layer_norm_cases()) {
    CAPTURE(args_json.dump());
    const BoundArgs args = layer_norm_op().bind(args_json);
    const std::string why = rejection(args_json);
    if (!why.empty()) {
      INFO(why);
      continue;
    }
    const TensorMap inputs = layer_norm_op().make_inputs(args, 5);
    TensorMap outputs = layer_norm_op().allocate_outputs(args);
    run_json(onednn(), args, json::object(), inputs, outputs);
    const Comparison cmp = compare_all(args, inputs, outputs.at("out"));
    CAPTURE(cmp.max_abs_error, cmp.bound, cmp.worst_index);
    CHECK(judge(cmp) == Disposition::kPassed);
    ++ran;
  }
  // At least the f32 last-axis layer norms run everywhere oneDNN does.
  CHECK(ran >= 3);
}

TEST_CASE("onednn layer_norm refuses what oneDNN 2.6 cannot do, with a reason",
          "[layer_norm][vendor]") {
  CHECK_THAT(rejection({{"x", "f32[8,64]"}, {"subtract_mean", false}}), Catch::Contains("RMSNorm"));
  CHECK_THAT(rejection({{"x", "f16[8,64]"}}), Catch::Contains("f16"));
  CHECK_THAT(rejection({{"x", "f64[8,64]"}}), Catch::Contains("f64"));
  CHECK(rejection({{"x", "f32[8,64]"}, {"scale", "f32[64]"}, {"offset", "f32[64]"}}).empty());
  CHECK(onednn().is_vendor());
  // auto never picks the vendor baseline.
  const BoundArgs args = layer_norm_op().bind({{"x", "f32[8,64]"}});
  const TensorMap inputs = layer_norm_op().make_inputs(args, 1);
  TensorMap outputs = layer_norm_op().allocate_outputs(args);
  const DispatchResult result =
      dispatch(layer_norm_op(), args, "auto", std::nullopt, inputs, outputs);
  CHECK_FALSE(result.impl->is_vendor());
}
