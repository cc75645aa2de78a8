// Shared by the linear_softmax_cross_entropy_loss_vjp tests: binding a case, running an
// implementation and judging both gradients against the float64 oracle under the op's error
// model, as verify does.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp_api.h"
#include "tests/ops/impl_calls.h"

namespace tokamax::testing {

// The VJP's args for x, w and a reduction, dloss of the matching shape (f32[B] or f32[]).
inline nlohmann::json lsce_vjp_json(const std::string& x, const std::string& w,
                                    const std::string& reduction, double padded = 0.0) {
  const TensorSpec x_spec = parse_tensor_spec(x);
  const std::string dloss =
      reduction == "none" ? "f32[" + std::to_string(x_spec.dims[0]) + "]" : "f32[]";
  nlohmann::json args = {{"x", x}, {"w", w}, {"reduction", reduction}, {"dloss", dloss}};
  if (padded > 0.0) args["padded_labels"] = padded;
  return args;
}

// Runs `impl` with `config` (null: its heuristics) and returns its outputs; every element starts
// as NaN, so an element the implementation leaves unwritten fails.
inline TensorMap run_lsce_vjp(const Implementation& impl, const BoundArgs& args,
                              const TensorMap& inputs, const nlohmann::json& config) {
  TensorMap outputs = linear_softmax_cross_entropy_loss_vjp_op().allocate_outputs(args);
  for (auto& [name, tensor] : outputs) {
    for (int64_t i = 0; i < tensor.num_elements(); ++i) tensor.set(i, std::nan(""));
  }
  const nlohmann::json chosen =
      config.is_null() ? heuristics_config_json(impl, args) : impl.canonical_config(config);
  check_config_json(impl, args, chosen);
  run_json(impl, args, chosen, inputs, outputs);
  return outputs;
}

// Each gradient against the full oracle: no violation, nothing non-finite; returns the worst
// error / bound.
inline double check_lsce_vjp_outputs(const BoundArgs& args, const TensorMap& inputs,
                                     const TensorMap& outputs) {
  const LinearSoftmaxCrossEntropyLossVjpOp& op = linear_softmax_cross_entropy_loss_vjp_op();
  double worst = 0.0;
  for (const char* name : {"dx", "dw"}) {
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
