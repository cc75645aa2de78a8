// Tests of the cpu triangle_multiplication (three phases on the GEMM engine) against the float64
// oracle: both triangle types, every dtype, tasks cut inside rows and planes, every SIMD target;
// and its configs.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/triangle_multiplication/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/ops/triangle_multiplication/layer_args.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const Implementation& cpu_impl() { return triangle_multiplication_op().implementation("cpu"); }

}  // namespace

TEST_CASE("cpu triangle_multiplication passes the oracle on every SIMD target",
          "[triangle_multiplication]") {
  const std::vector<json> cases = {
      triangle_layer("bf16", 20, 16, 24, 12, "outgoing"),
      triangle_layer("f32", 17, 9, 5, 7, "incoming"),
      triangle_layer("f16", 9, 12, 8, 16, "outgoing"),
      triangle_layer("bf16", 33, 8, 6, 10, "incoming"),
  };
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const json& c : cases) {
      const BoundArgs args = triangle_multiplication_op().bind(c);
      const TensorMap inputs = triangle_multiplication_op().make_inputs(args, 5);
      json small = heuristics_config_json(cpu_impl(), args);
      small["tile_m"] = 5;  // tasks cut inside rows of i and inside the position tiles
      small["num_threads"] = 2;
      for (const json& cfg : {heuristics_config_json(cpu_impl(), args), small}) {
        CAPTURE(args.key(), cfg.dump());
        const Comparison result =
            run_against_oracle(triangle_multiplication_op(), "cpu", args, cfg, inputs, args, "out");
        CHECK(judge(result) == Disposition::kPassed);
      }
    }
  });
}

TEST_CASE("cpu triangle_multiplication configs", "[triangle_multiplication]") {
  const BoundArgs args =
      triangle_multiplication_op().bind(triangle_layer("bf16", 384, 128, 128, 128, "outgoing"));
  const json h = heuristics_config_json(cpu_impl(), args);
  CHECK(h["tile_n"] == 0);
  const std::vector<json> space = autotuning_configs_json(cpu_impl(), args);
  CHECK(space.front() == h);
  CHECK(space.size() > 4);
  auto field = [&](json config) {
    try {
      check_config_json(cpu_impl(), args, config);
    } catch (const InvalidArgument& e) {
      return e.field();
    }
    return std::string("<no error>");
  };
  CHECK(field(h) == "<no error>");
  json tiled = h;
  tiled["tile_n"] = 64;
  CHECK(field(tiled) == "tile_n");
  json native = h;
  native["bf16_path"] = "native_dot";
  CHECK(field(native) == "bf16_path");
}
