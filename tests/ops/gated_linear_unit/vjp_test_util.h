// Shared by the gated_linear_unit_vjp tests: running an implementation and judging every
// gradient against the float64 oracle under the op's error model, as verify does.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/gated_linear_unit/vjp_api.h"
#include "tests/ops/impl_calls.h"

namespace tokamax::testing {

// Runs `impl` with `config` (null: its heuristics); every element starts as NaN, so an element
// left unwritten fails.
inline TensorMap run_glu_vjp(const Implementation& impl, const BoundArgs& args,
                             const TensorMap& inputs, const nlohmann::json& config) {
  TensorMap outputs = gated_linear_unit_vjp_op().allocate_outputs(args);
  for (auto& [name, tensor] : outputs) {
    for (int64_t i = 0; i < tensor.num_elements(); ++i) tensor.set(i, std::nan(""));
  }
  run_json(impl, args, config.is_null() ? heuristics_config_json(impl, args) : config, inputs,
           outputs);
  return outputs;
}

// Every gradient against the full oracle: no violation, nothing non-finite.
inline void check_glu_vjp_outputs(const BoundArgs& args, const TensorMap& inputs,
                                  const TensorMap& outputs) {
  const GatedLinearUnitVjpOp& op = gated_linear_unit_vjp_op();
  for (const TensorDecl& decl : op.outputs(args)) {
    const Tensor& out = outputs.at(decl.name);
    std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
    std::iota(index.begin(), index.end(), int64_t{0});
    const Comparison c =
        compare_to_oracle(out, op.oracle(args, inputs, decl.name, index), op.error_model(args));
    CAPTURE(args.key(), decl.name, c.worst_ratio, c.worst_index, c.max_abs_error);
    CHECK(c.nonfinite == 0);
    CHECK(c.violations == 0);
  }
}

}  // namespace tokamax::testing
