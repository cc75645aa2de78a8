// Tests of the cpu triangle_multiplication_vjp (the forward's two phases, three gradient phases
// on the GEMM engine) and the oneDNN composite against the float64 oracle: both triangle types,
// every dtype, tasks cut inside rows and slots, every SIMD target; and the same sums whatever
// the thread count.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "ops/framework/vjp.h"
#include "ops/triangle_multiplication/vjp/api.h"
#include "tests/ops/impl_calls.h"
#include "tests/ops/oracle_run.h"
#include "tests/ops/triangle_multiplication/layer_args.h"
#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;
using nlohmann::json;

namespace {

const TriangleMultiplicationVjpOp& op() { return triangle_multiplication_vjp_op(); }

void check_all_outputs(const std::string& impl, const BoundArgs& args, const json& config,
                       const TensorMap& inputs) {
  for (const TensorDecl& decl : op().outputs(args)) {
    CAPTURE(args.key(), impl, config.dump(), decl.name);
    const Comparison result = run_against_oracle(op(), impl, args, config, inputs, args, decl.name);
    CHECK(judge(result) == Disposition::kPassed);
  }
}

const std::vector<json>& cases() {
  static const std::vector<json> all = {
      triangle_vjp_layer("bf16", 20, 16, 24, 12, "outgoing"),
      triangle_vjp_layer("f32", 17, 9, 5, 7, "incoming"),
      triangle_vjp_layer("f16", 9, 12, 8, 16, "outgoing"),
      triangle_vjp_layer("bf16", 13, 8, 6, 10, "incoming"),
  };
  return all;
}

}  // namespace

TEST_CASE("cpu triangle_multiplication_vjp passes the oracle on every SIMD target",
          "[triangle_multiplication_vjp]") {
  const Implementation& cpu = op().implementation("cpu");
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    for (const json& c : cases()) {
      const BoundArgs args = op().bind(c);
      const TensorMap inputs = op().make_inputs(args, 5);
      json small = heuristics_config_json(cpu, args);
      small["tile_m"] = 5;  // tasks cut inside rows of i, position tiles across slots
      small["num_threads"] = 2;
      for (const json& cfg : {heuristics_config_json(cpu, args), small}) {
        check_all_outputs("cpu", args, cfg, inputs);
      }
    }
  });
}

TEST_CASE("onednn triangle_multiplication_vjp passes the oracle", "[triangle_multiplication_vjp]") {
  for (const json& c : cases()) {
    const BoundArgs args = op().bind(c);
    check_all_outputs("onednn", args, json::object(), op().make_inputs(args, 5));
  }
}

TEST_CASE("cpu triangle_multiplication_vjp's weight gradients do not depend on the thread count",
          "[triangle_multiplication_vjp]") {
  // The slots are fixed runs of tasks, added in order: one thread and two give the same bits.
  const Implementation& cpu = op().implementation("cpu");
  const BoundArgs args = op().bind(triangle_vjp_layer("f32", 23, 8, 6, 5, "outgoing"));
  const TensorMap inputs = op().make_inputs(args, 7);
  json config = heuristics_config_json(cpu, args);
  config["tile_m"] = 3;
  std::vector<TensorMap> results;
  for (int threads : {1, 2}) {
    config["num_threads"] = threads;
    TensorMap outputs = op().allocate_outputs(args);
    run_json(cpu, args, config, inputs, outputs);
    results.push_back(std::move(outputs));
  }
  for (const TensorDecl& decl : op().outputs(args)) {
    CAPTURE(decl.name);
    const Tensor& a = results[0].at(decl.name);
    const Tensor& b = results[1].at(decl.name);
    int64_t differing = 0;
    for (int64_t i = 0; i < a.num_elements(); ++i) differing += a.get(i) != b.get(i);
    CHECK(differing == 0);
  }
}
