// Shared helpers of the dot_product_attention tests: run an implementation, compare with the
// float64 oracle under the op's error model.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "ops/dot_product_attention/api.h"
#include "ops/framework/numerics.h"
#include "tests/ops/impl_calls.h"

namespace tokamax::attention_testing {

inline BoundArgs bind_args(const nlohmann::json& args) {
  return dot_product_attention_op().bind(args);
}

// Every flat index of the output.
inline std::vector<int64_t> all_indices(const BoundArgs& args) {
  const TensorSpec spec = dot_product_attention_op().outputs(args)[0].spec;
  std::vector<int64_t> index(static_cast<size_t>(spec.num_elements()));
  std::iota(index.begin(), index.end(), 0);
  return index;
}

// Runs implementation `impl` with `config` on seeded inputs. The output starts as NaN so every
// element (fully masked rows included) must be written.
inline Tensor run_impl(const std::string& impl, const BoundArgs& args, const TensorMap& inputs,
                       const nlohmann::json& config = nlohmann::json::object()) {
  const DotProductAttentionOp& op = dot_product_attention_op();
  TensorMap outputs = op.allocate_outputs(args);
  Tensor& out = outputs.at("out");
  for (int64_t e = 0; e < out.num_elements(); ++e) out.set(e, std::nan(""));
  const Implementation& implementation = op.implementation(impl);
  check_args(implementation, args);
  const nlohmann::json resolved =
      config.empty() ? heuristics_config_json(implementation, args, cpu::host_device()) : config;
  check_config_json(implementation, args, resolved);
  run_json(implementation, args, resolved, inputs, outputs);
  return outputs.at("out");
}

// The comparison of `out` with the oracle at every output element.
inline Comparison compare_all(const BoundArgs& args, const TensorMap& inputs, const Tensor& out) {
  const DotProductAttentionOp& op = dot_product_attention_op();
  const OracleSample oracle = op.oracle(args, inputs, "out", all_indices(args));
  return compare_to_oracle(out, oracle, op.error_model(args));
}

}  // namespace tokamax::attention_testing
