// Shared helpers of the linear_softmax_cross_entropy_loss tests: running an implementation and
// judging it against the float64 oracle.
#pragma once

#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "ops/framework/numerics.h"
#include "ops/linear_softmax_cross_entropy_loss/api.h"
#include "tests/ops/impl_calls.h"

namespace tokamax::testing {

inline BoundArgs lsce_args(const std::string& x, const std::string& w,
                           const std::string& reduction) {
  return linear_softmax_cross_entropy_loss_op().bind(
      {{"x", x}, {"w", w}, {"reduction", reduction}});
}

// Runs implementation `impl` with `config` (its heuristics when null) on seeded inputs.
inline Tensor run_lsce(const BoundArgs& args, const TensorMap& inputs, const std::string& impl,
                       const nlohmann::json& config = nullptr) {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  const Implementation& implementation = op.implementation(impl);
  const nlohmann::json resolved =
      config.is_null() ? heuristics_config_json(implementation, args, cpu::host_device())
                       : implementation.canonical_config(config);
  check_args(implementation, args);
  check_config_json(implementation, args, resolved);
  TensorMap outputs = op.allocate_outputs(args);
  run_json(implementation, args, resolved, inputs, outputs);
  return outputs.at("loss");
}

// The full oracle of the output.
inline OracleSample lsce_full_oracle(const BoundArgs& args, const TensorMap& inputs) {
  const auto& op = linear_softmax_cross_entropy_loss_op();
  const int64_t total = op.outputs(args)[0].spec.num_elements();
  std::vector<int64_t> index(static_cast<size_t>(total));
  std::iota(index.begin(), index.end(), 0);
  return op.oracle(args, inputs, "loss", index);
}

}  // namespace tokamax::testing
