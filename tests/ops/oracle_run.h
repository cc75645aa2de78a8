// Shared test helper: run one implementation and compare a whole output with the float64 oracle.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/framework/op.h"
#include "tests/ops/impl_calls.h"

namespace tokamax {

// Compares every element of `out`, output `output` of `op`, with the oracle of `args`.
inline Comparison compare_whole_output(const Op& op, const BoundArgs& args, const TensorMap& inputs,
                                       const Tensor& out, const std::string& output) {
  std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
  std::iota(index.begin(), index.end(), 0);
  return compare_to_oracle(out, op.oracle(args, inputs, output, index), op.error_model(args));
}

// Runs `impl` of `op` with `config` on `inputs` (outputs start as NaN, so every element must be
// written) and compares every element of `output` with the oracle of `bound_args`: the same
// problem, possibly with other arguments (another precision) whose bound then applies.
inline Comparison run_against_oracle(const Op& op, const std::string& impl, const BoundArgs& args,
                                     const nlohmann::json& config, const TensorMap& inputs,
                                     const BoundArgs& bound_args, const std::string& output) {
  TensorMap outputs = op.allocate_outputs(args);
  Tensor& out = outputs.at(output);
  for (int64_t i = 0; i < out.num_elements(); ++i) out.set(i, std::nan(""));
  run_json(op.implementation(impl), args, config, inputs, outputs);
  return compare_whole_output(op, bound_args, inputs, out, output);
}

}  // namespace tokamax
