// Tests of the cpu router_topk implementation: both selection methods on every SIMD target and
// every score dtype, bit for bit against the reference (NaN weights included), and its configs.
#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <vector>

#include "ops/router_topk/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const Implementation& cpu_impl() { return router_topk_op().implementation("cpu"); }

void check_cpu(const BoundArgs& args, const TensorMap& inputs, const json& config) {
  CAPTURE(args.key(), config.dump());
  TensorMap outputs = router_topk_op().allocate_outputs(args);
  for (auto& [name, tensor] : outputs) {
    std::fill_n(static_cast<int32_t*>(tensor.raw()), tensor.num_elements(), 0x5a5a5a5a);
  }
  check_config_json(cpu_impl(), args, config);
  run_json(cpu_impl(), args, config, inputs, outputs);
  TensorMap reference = router_topk_op().allocate_outputs(args);
  run_json(router_topk_op().implementation("reference"), args, json::object(), inputs, reference);
  for (const auto& [name, tensor] : reference) {
    CAPTURE(name);
    // Bits: a NaN weight must be NaN (both are the default quiet NaN).
    const int32_t* got = static_cast<const int32_t*>(outputs.at(name).raw());
    const int32_t* want = static_cast<const int32_t*>(tensor.raw());
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      if (got[i] != want[i]) {
        CAPTURE(i, got[i], want[i]);
        FAIL("cpu differs from the reference");
      }
    }
  }
}

}  // namespace

TEST_CASE("cpu router_topk equals the reference bit for bit on every target and dtype",
          "[router_topk]") {
  const std::vector<json> cases = {
      {{"scores", "f32[37,256]"}, {"k", 8}},   {{"scores", "bf16[20,128]"}, {"k", 4}},
      {{"scores", "f16[20,160]"}, {"k", 6}},   {{"scores", "f32[9,37]"}, {"k", 37}},
      {{"scores", "bf16[6,1000]"}, {"k", 90}}, {{"scores", "f32[0,16]"}, {"k", 2}},
  };
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const json& c : cases) {
      const BoundArgs args = router_topk_op().bind(c);
      const TensorMap inputs = router_topk_op().make_inputs(args, 9);
      for (const bool radix : {false, true}) {
        check_cpu(args, inputs,
                  {{"radix_select", radix}, {"rows_per_task", 4}, {"num_threads", 0}});
      }
      check_cpu(args, inputs, heuristics_config_json(cpu_impl(), args));
    }
  });
}
