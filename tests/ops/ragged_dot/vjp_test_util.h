// Shared by the ragged_dot_vjp tests: running an implementation and judging both gradients
// against the float64 oracle under the op's error model, as verify does.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/ragged_dot/vjp_api.h"
#include "tests/ops/impl_calls.h"

namespace tokamax::testing {

// Runs `impl` with `config` (null: its heuristics) and returns its outputs; every element starts
// as NaN, so an element the implementation leaves unwritten fails.
inline TensorMap run_ragged_dot_vjp(const Implementation& impl, const BoundArgs& args,
                                    const TensorMap& inputs, const nlohmann::json& config) {
  TensorMap outputs = ragged_dot_vjp_op().allocate_outputs(args);
  for (auto& [name, tensor] : outputs) {
    for (int64_t i = 0; i < tensor.num_elements(); ++i) tensor.set(i, std::nan(""));
  }
  const nlohmann::json chosen = config.is_null() ? heuristics_config_json(impl, args) : config;
  run_json(impl, args, chosen, inputs, outputs);
  return outputs;
}

// Each gradient against the full oracle: passed, with the worst error / bound returned.
inline double check_ragged_dot_vjp_outputs(const BoundArgs& args, const TensorMap& inputs,
                                           const TensorMap& outputs) {
  const RaggedDotVjpOp& op = ragged_dot_vjp_op();
  double worst = 0.0;
  for (const char* name : {"dlhs", "drhs"}) {
    const Tensor& out = outputs.at(name);
    std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
    std::iota(index.begin(), index.end(), int64_t{0});
    const Comparison c =
        compare_to_oracle(out, op.oracle(args, inputs, name, index), op.error_model(args));
    CAPTURE(args.key(), name, c.worst_ratio, c.worst_index, c.max_abs_error, c.nonfinite);
    CHECK(c.nonfinite == 0);
    CHECK(c.violations == 0);
    worst = std::max(worst, c.worst_ratio);
  }
  return worst;
}

}  // namespace tokamax::testing
