// Tests for the cpu ragged_dot implementation against the reference, and its configs.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/cpu_info.h"
#include "ops/errors.h"
#include "ops/ragged_dot/api.h"
#include "ops/ragged_dot/base.h"

using namespace tokamax;
using nlohmann::json;

namespace {

const Implementation& cpu_impl() { return ragged_dot_op().implementation("cpu"); }

// Shapes covering empty groups, one group, odd sizes, partial tiles, K = 1 and rows past the sum.
std::vector<json> test_cases() {
  return {
      {{"lhs", "f32[64,32]"}, {"rhs", "f32[4,32,48]"}, {"group_sizes", {0, 7, 13, 33}}},
      {{"lhs", "f32[37,19]"}, {"rhs", "f32[1,19,23]"}, {"group_sizes", {37}}},
      {{"lhs", "f32[20,1]"}, {"rhs", "f32[3,1,16]"}, {"group_sizes", {7, 0, 13}}},
      {{"lhs", "f32[9,8]"}, {"rhs", "f32[2,8,8]"}, {"group_sizes", {0, 0}}},
      {{"lhs", "f32[130,300]"}, {"rhs", "f32[3,300,70]"}, {"group_sizes", {33, 64, 13}}},
      {{"lhs", "bf16[50,40]"}, {"rhs", "bf16[3,40,72]"}, {"group_sizes", {33, 0, 7}}},
      {{"lhs", "bf16[50,40]"},
       {"rhs", "bf16[3,40,72]"},
       {"group_sizes", {13, 7, 30}},
       {"preferred_element_type", "bf16"}},
      {{"lhs", "f16[45,24]"}, {"rhs", "f16[2,24,40]"}, {"group_sizes", {33, 7}}},
      {{"lhs", "f16[45,24]"},
       {"rhs", "f16[2,24,40]"},
       {"group_sizes", {7, 33}},
       {"preferred_element_type", "f16"}},
      {{"lhs", "f32[30,17]"},
       {"rhs", "f32[2,17,9]"},
       {"group_sizes", {13, 7}},
       {"preferred_element_type", "bf16"}},
      {{"lhs", "f32[30,17]"},
       {"rhs", "f32[2,17,9]"},
       {"group_sizes", {13, 7}},
       {"preferred_element_type", "f16"}},
      {{"lhs", "f64[25,31]"}, {"rhs", "f64[2,31,12]"}, {"group_sizes", {13, 7}}},
      {{"lhs", "f32[25,31]"},
       {"rhs", "f32[2,31,12]"},
       {"group_sizes", {7, 13}},
       {"preferred_element_type", "f64"}},
  };
}

// Runs the cpu implementation with `config` and checks it against the reference (accumulating
// like the kernel, written to f32/f64 so the only output rounding is the implementation's).
void check_against_reference(const BoundArgs& args, const json& config) {
  CAPTURE(args.key(), config.dump());
  const RaggedDotOp& op = ragged_dot_op();
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  const TensorMap inputs = op.make_inputs(args, 11);
  TensorMap outputs = op.allocate_outputs(args);
  HostTensor& out = outputs.at("out");
  // NaN everywhere first: every element, including rows past the group sum, must be written.
  for (int64_t i = 0; i < out.num_elements(); ++i) out.set(i, std::nan(""));
  cpu_impl().check_args(args);
  cpu_impl().check_config_json(args, config);
  cpu_impl().run_json(args, config, inputs, outputs);

  const bool f64_acc = p.out_dtype == DType::kF64;
  RaggedDotProblem ref_problem = p;
  ref_problem.out_dtype = f64_acc ? DType::kF64 : DType::kF32;
  HostTensor ref(TensorSpec{ref_problem.out_dtype, {p.M, p.N}});
  if (f64_acc) {
    ragged_dot_reference<double>(ref_problem, inputs.at("lhs"), inputs.at("rhs"), ref);
  } else {
    ragged_dot_reference<float>(ref_problem, inputs.at("lhs"), inputs.at("rhs"), ref);
  }
  std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
  std::iota(index.begin(), index.end(), 0);
  const OracleSample oracle = op.oracle(args, inputs, "out", index);

  // Tolerance table: accumulation roundoff per accumulator, output roundoff per output dtype,
  // and an absolute floor for f16's subnormal range.
  const double u_acc = f64_acc ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const std::map<DType, double> u_out = {{DType::kF64, std::ldexp(1.0, -53)},
                                         {DType::kF32, std::ldexp(1.0, -24)},
                                         {DType::kBF16, std::ldexp(1.0, -8)},
                                         {DType::kF16, std::ldexp(1.0, -11)}};
  const std::map<DType, double> abs_floor = {{DType::kF64, 0.0},
                                             {DType::kF32, 0.0},
                                             {DType::kBF16, 0.0},
                                             {DType::kF16, std::ldexp(1.0, -25)}};
  // Both sides accumulate K terms: each may be up to K * u_acc * sum|a*b| from the exact value.
  const double K = static_cast<double>(std::max<int64_t>(p.K, 1));
  for (size_t s = 0; s < index.size(); ++s) {
    const double expected = ref.get(index[s]);
    const double bound = 2 * K * u_acc * oracle.magnitude[s] +
                         u_out.at(p.out_dtype) * std::fabs(expected) + abs_floor.at(p.out_dtype);
    CAPTURE(s, expected, oracle.magnitude[s]);
    REQUIRE(std::fabs(out.get(index[s]) - expected) <= bound);
  }
}

}  // namespace

TEST_CASE("cpu ragged_dot matches the reference across shapes, dtypes and configs",
          "[ragged_dot]") {
  const DeviceInfo& device = cpu::host_device();
  for (const json& args_json : test_cases()) {
    const BoundArgs args = ragged_dot_op().bind(args_json);
    std::vector<json> configs = {cpu_impl().heuristics_config_json(args, device),
                                 // Tiny and odd tiles: partial tiles everywhere, many K blocks.
                                 {{"tile_m", 1}, {"tile_n", 8}, {"tile_k", 1}},
                                 {{"tile_m", 5}, {"tile_n", 16}, {"tile_k", 3}, {"num_threads", 2}},
                                 {{"tile_m", 3}, {"tile_n", 8}, {"tile_k", 7}, {"num_threads", 1}}};
    // Several configs of the search space, spread over it.
    const std::vector<json> space = cpu_impl().autotuning_configs_json(args, device);
    for (size_t i = 0; i < space.size(); i += std::max<size_t>(1, space.size() / 5)) {
      configs.push_back(space[i]);
    }
    for (const json& config : configs) check_against_reference(args, config);
  }
}

TEST_CASE("cpu ragged_dot runs through the high-level API", "[ragged_dot]") {
  const BoundArgs args = ragged_dot_op().bind(test_cases()[0]);
  const TensorMap inputs = ragged_dot_op().make_inputs(args, 1);
  RaggedDotOptions options;
  options.implementation = "cpu";
  const HostTensor out =
      ragged_dot(inputs.at("lhs"), inputs.at("rhs"), inputs.at("group_sizes"), options);
  options.implementation = "reference";
  const HostTensor ref =
      ragged_dot(inputs.at("lhs"), inputs.at("rhs"), inputs.at("group_sizes"), options);
  REQUIRE(out.num_elements() == ref.num_elements());
  // Same k order and f32 accumulation: equal up to a few ulps (FMA contraction may differ).
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    CHECK(std::fabs(out.get(i) - ref.get(i)) <= 1e-5 * (1 + std::fabs(ref.get(i))));
  }
}

TEST_CASE("cpu ragged_dot rejects dtype combinations it does not implement", "[ragged_dot]") {
  const BoundArgs mixed =
      ragged_dot_op().bind({{"lhs", "bf16[8,4]"}, {"rhs", "f32[2,4,8]"}, {"group_sizes", {4, 4}}});
  CHECK_THROWS_AS(cpu_impl().check_args(mixed), NotImplemented);
  const BoundArgs narrowing = ragged_dot_op().bind(
      {{"lhs", "f64[8,4]"}, {"rhs", "f64[2,4,8]"}, {"preferred_element_type", "f32"}});
  CHECK_THROWS_WITH(cpu_impl().check_args(narrowing), Catch::Contains("f64"));
  CHECK(cpu_impl().supported_on(cpu::host_device()).ok);
  DeviceInfo gpu;
  gpu.kind = "cuda";
  CHECK_FALSE(cpu_impl().supported_on(gpu).ok);
}

TEST_CASE("cpu ragged_dot heuristics are valid for every shape and device", "[ragged_dot]") {
  std::vector<DeviceInfo> devices = {cpu::host_device()};
  DeviceInfo unknown_caches;  // containers may report no cache sizes
  unknown_caches.kind = "cpu";
  unknown_caches.cores = 3;
  devices.push_back(unknown_caches);
  DeviceInfo big = unknown_caches;
  big.cores = 256;
  big.l1d_bytes = 64 << 10;
  big.l2_bytes = 4 << 20;
  devices.push_back(big);
  for (const DeviceInfo& device : devices) {
    for (const json& args_json : test_cases()) {
      const BoundArgs args = ragged_dot_op().bind(args_json);
      const json config = cpu_impl().heuristics_config_json(args, device);
      CAPTURE(args.key(), config.dump(), device.cores);
      CHECK(cpu_impl().canonical_config(config) == config);
      CHECK_NOTHROW(cpu_impl().check_config_json(args, config));
    }
  }
}

TEST_CASE("cpu ragged_dot autotuning configs are valid, distinct and round-trip", "[ragged_dot]") {
  const BoundArgs args = ragged_dot_op().bind(
      {{"lhs", "bf16[256,256]"}, {"rhs", "bf16[4,256,256]"}, {"group_sizes", {64, 64, 64, 64}}});
  const std::vector<json> configs = cpu_impl().autotuning_configs_json(args, cpu::host_device());
  CHECK(configs.size() >= 8);
  std::set<std::string> distinct;
  for (const json& config : configs) {
    CAPTURE(config.dump());
    CHECK(cpu_impl().canonical_config(config) == config);
    CHECK_NOTHROW(cpu_impl().check_config_json(args, config));
    distinct.insert(config.dump());
  }
  CHECK(distinct.size() == configs.size());

  // ci-sized shapes, tiny extents included, still get a real search space.
  for (const json& args_json : test_cases()) {
    const BoundArgs small = ragged_dot_op().bind(args_json);
    if (RaggedDotProblem::from(small).rows() == 0) continue;  // nothing to tune
    CAPTURE(small.key());
    CHECK(cpu_impl().autotuning_configs_json(small, cpu::host_device()).size() >= 8);
  }

  const BoundArgs large = ragged_dot_op().bind(
      {{"lhs", "bf16[8192,4096]"}, {"rhs", "bf16[8,4096,2048]"}, {"group_sizes", nullptr}});
  DeviceInfo device = cpu::host_device();
  device.l2_bytes = 2 << 20;
  CHECK(cpu_impl().autotuning_configs_json(large, device).size() >= 24);
}

TEST_CASE("cpu ragged_dot config JSON is strict and names the bad field", "[ragged_dot]") {
  auto field_of = [](const json& config) -> std::string {
    try {
      cpu_impl().canonical_config(config);
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return "<no error>";
  };
  CHECK(field_of({{"tile_m", 32}, {"tile_n", 64}, {"tile_k", 64}}) == "<no error>");
  CHECK(field_of({{"tile_x", 1}}) == "tile_x");
  CHECK(field_of({{"tile_n", 12}}) == "tile_n");
  CHECK(field_of({{"tile_n", 0}}) == "tile_n");
  CHECK(field_of({{"tile_m", 0}}) == "tile_m");
  CHECK(field_of({{"tile_k", 0}}) == "tile_k");
  CHECK(field_of({{"tile_m", "big"}}) == "tile_m");
  CHECK(field_of({{"num_threads", -1}}) == "num_threads");

  const BoundArgs args = ragged_dot_op().bind(test_cases()[0]);
  const int too_many = 4 * cpu::host_device().cores + 1;
  try {
    cpu_impl().check_config_json(args, {{"num_threads", too_many}});
    FAIL("expected InvalidArgument");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "num_threads");
  }
}
