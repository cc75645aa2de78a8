// Tests of the cpu top_k implementation: both selection methods on every SIMD target, against the
// reference (exactly: selection is integers) on generated and adversarial rows, and its configs.
#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <limits>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/top_k/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const Implementation& cpu_impl() { return top_k_op().implementation("cpu"); }

// cpu with `config` gives the reference's outputs bit for bit (outputs pre-filled with a value
// no selection holds: every element must be written).
void check_cpu(const BoundArgs& args, const TensorMap& inputs, const json& config) {
  CAPTURE(args.key(), config.dump());
  TensorMap outputs = top_k_op().allocate_outputs(args);
  for (auto& [name, tensor] : outputs) {
    std::fill_n(tensor.data<int32_t>(), tensor.num_elements(), 0x5a5a5a5a);
  }
  check_config_json(cpu_impl(), args, config);
  run_json(cpu_impl(), args, config, inputs, outputs);
  TensorMap reference = top_k_op().allocate_outputs(args);
  run_json(top_k_op().implementation("reference"), args, json::object(), inputs, reference);
  for (const auto& [name, tensor] : reference) {
    CAPTURE(name);
    const int32_t* got = outputs.at(name).data<int32_t>();
    const int32_t* want = tensor.data<int32_t>();
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      if (got[i] != want[i]) {
        CAPTURE(i, got[i], want[i]);
        FAIL("cpu differs from the reference");
      }
    }
  }
}

json config(bool radix, int rows_per_task = 3, int threads = 0) {
  return {{"radix_select", radix}, {"rows_per_task", rows_per_task}, {"num_threads", threads}};
}

}  // namespace

TEST_CASE("cpu top_k equals the reference with both methods on every SIMD target", "[top_k]") {
  const std::vector<json> cases = {
      {{"scores", "f32[37,256]"}, {"k", 8}},
      {{"scores", "f32[16,131]"}, {"k", 4}, {"row_lengths", "i32[16]"}, {"return_scores", true}},
      {{"scores", "f32[8,1000]"}, {"k", 70}, {"row_lengths", "i32[8]"}},
      {{"scores", "i32[5,4099]"}, {"k", 300}, {"return_scores", true}},
      {{"scores", "f32[6,40]"}, {"k", 40}, {"return_scores", true}},
      {{"scores", "f32[4,5]"}, {"k", 1}},
      {{"scores", "f32[0,16]"}, {"k", 2}},
  };
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const json& c : cases) {
      const BoundArgs args = top_k_op().bind(c);
      const TensorMap inputs = top_k_op().make_inputs(args, 5);
      for (const bool radix : {false, true}) check_cpu(args, inputs, config(radix));
      check_cpu(args, inputs, heuristics_config_json(cpu_impl(), args));
    }
  });
}

TEST_CASE("cpu top_k on adversarial rows: all equal, sorted either way, all ineligible",
          "[top_k]") {
  const int64_t n = 300;
  const BoundArgs args =
      top_k_op().bind({{"scores", "f32[6,300]"}, {"k", 20}, {"return_scores", true}});
  Tensor scores(args.tensor("scores"));
  float* s = scores.data<float>();
  for (int64_t c = 0; c < n; ++c) {
    s[0 * n + c] = 1.0f;                       // one tie across the row
    s[1 * n + c] = static_cast<float>(c);      // ascending: every score beats the last
    s[2 * n + c] = static_cast<float>(n - c);  // descending
    s[3 * n + c] = -std::numeric_limits<float>::infinity();  // nothing eligible
    s[4 * n + c] = c % 2 == 0 ? -0.0f : 0.0f;                // zeros of both signs: +0.0 first
    s[5 * n + c] = c < 5 ? std::numeric_limits<float>::quiet_NaN() : -1.0f * (c % 7);
  }
  const TensorMap inputs = {{"scores", scores}};
  for (const bool radix : {false, true}) {
    for (const int threads : {1, 2}) check_cpu(args, inputs, config(radix, 1, threads));
  }
}

TEST_CASE("cpu top_k configs: heuristics by k, a search space that covers both methods",
          "[top_k]") {
  const BoundArgs small = top_k_op().bind({{"scores", "f32[4096,256]"}, {"k", 8}});
  const BoundArgs large = top_k_op().bind({{"scores", "f32[64,10240]"}, {"k", 2048}});
  CHECK(heuristics_config_json(cpu_impl(), small)["radix_select"] == false);
  CHECK(heuristics_config_json(cpu_impl(), large)["radix_select"] == true);
  const std::vector<json> space = autotuning_configs_json(cpu_impl(), small);
  CHECK(std::any_of(space.begin(), space.end(), [](const json& c) { return c["radix_select"]; }));
  CHECK_THROWS_AS(check_config_json(cpu_impl(), small, config(false, 0)), InvalidArgument);
  CHECK_THROWS_AS(check_config_json(cpu_impl(), small, config(false, 1, 100000)), InvalidArgument);
}
