// The independent check of a VJP op's oracle: central finite differences of its forward op's
// float64 oracle. With L(theta) = sum over the forward outputs of <cotangent, output(theta)>,
// dL/dtheta_i is the gradient the VJP returns for input element theta_i, so
//   (L(theta + h e_i) - L(theta - h e_i)) / 2h
// must match the VJP op's oracle to O(h^2) (truncation) plus O(eps |L| / h) (rounding).
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/framework/op.h"
#include "ops/framework/vjp.h"
#include "tests/ops/impl_calls.h"

namespace tokamax::testing {

// L(inputs) = sum_o <cotangent of o, forward output o>, every output through the oracle.
inline double vjp_objective(const Op& primal, const BoundArgs& forward, const TensorMap& inputs,
                            const std::vector<std::string>& cotangents) {
  double total = 0.0;
  for (const TensorDecl& out : primal.outputs(forward)) {
    const std::string cot = vjp_name(out.name);
    if (std::find(cotangents.begin(), cotangents.end(), cot) == cotangents.end()) continue;
    std::vector<int64_t> all(static_cast<size_t>(out.spec.num_elements()));
    std::iota(all.begin(), all.end(), int64_t{0});
    const OracleSample y = primal.oracle(forward, inputs, out.name, all);
    const Tensor& dy = inputs.at(cot);
    for (size_t j = 0; j < all.size(); ++j) total += dy.get(all[j]) * y.value[j];
  }
  return total;
}

// Checks every gradient output d<X> of `vjp` for `vjp_args` (f64 tensors: exact perturbations)
// at `samples` elements of X against central differences of the forward oracle.
inline void check_vjp_by_finite_differences(const Op& vjp, const nlohmann::json& vjp_args,
                                            uint64_t seed = 1, int64_t samples = 12) {
  const Op* primal = vjp.primal();
  REQUIRE(primal != nullptr);
  const std::vector<std::string> cotangents = vjp.cotangents();
  const BoundArgs bound = vjp.bind(vjp_args);
  const BoundArgs forward = primal_args(*primal, bound, cotangents);
  const TensorMap inputs = vjp.make_inputs(bound, seed);
  const double objective = vjp_objective(*primal, forward, inputs, cotangents);
  int64_t checked = 0;
  for (const TensorDecl& grad : vjp.outputs(bound)) {
    const std::string x_name = grad.name.substr(1);  // d<X> -> X
    CAPTURE(vjp_args.dump(), grad.name);
    REQUIRE(inputs.count(x_name) == 1);
    const Tensor& x = inputs.at(x_name);
    REQUIRE(x.dtype() == DType::kF64);
    const std::vector<int64_t> index = sample_indices(x.num_elements(), samples, seed + 7);
    const OracleSample analytic = vjp.oracle(bound, inputs, grad.name, index);
    double scale = 0.0;
    for (double v : analytic.value) scale = std::max(scale, std::fabs(v));
    for (size_t k = 0; k < index.size(); ++k) {
      const double x0 = x.get(index[k]);
      const double h = 1e-5 * std::max(1.0, std::fabs(x0));
      double side[2];
      for (int s = 0; s < 2; ++s) {
        TensorMap perturbed = inputs;
        perturbed[x_name] = x.copy(x.memory());
        perturbed[x_name].set(index[k], x0 + (s == 0 ? h : -h));
        side[s] = vjp_objective(*primal, forward, perturbed, cotangents);
      }
      const double fd = (side[0] - side[1]) / (2.0 * h);
      CAPTURE(index[k], analytic.value[k], fd, scale);
      CHECK(std::fabs(fd - analytic.value[k]) <=
            1e-6 * (std::fabs(analytic.value[k]) + scale) + 1e-12 * std::fabs(objective) / h);
      ++checked;
    }
  }
  CHECK(checked > 0);
}

// Runs `impl` of `op` with `config` (null: its heuristics; otherwise checked against the case
// first) and returns its outputs; every element starts as NaN, so an element the implementation
// leaves unwritten fails.
inline TensorMap run_with_nan_outputs(const Op& op, const Implementation& impl,
                                      const BoundArgs& args, const TensorMap& inputs,
                                      const nlohmann::json& config) {
  TensorMap outputs = op.allocate_outputs(args);
  for (auto& [name, tensor] : outputs) {
    for (int64_t i = 0; i < tensor.num_elements(); ++i) tensor.set(i, std::nan(""));
  }
  const nlohmann::json chosen =
      config.is_null() ? heuristics_config_json(impl, args) : impl.canonical_config(config);
  check_config_json(impl, args, chosen);
  run_json(impl, args, chosen, inputs, outputs);
  return outputs;
}

// Every output of `op` against its full oracle under its error model, as verify judges: no
// violation, nothing non-finite. Returns the worst error / bound.
inline double check_outputs_against_oracle(const Op& op, const BoundArgs& args,
                                           const TensorMap& inputs, const TensorMap& outputs) {
  double worst = 0.0;
  for (const TensorDecl& decl : op.outputs(args)) {
    const Tensor& out = outputs.at(decl.name);
    std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
    std::iota(index.begin(), index.end(), int64_t{0});
    const Comparison c =
        compare_to_oracle(out, op.oracle(args, inputs, decl.name, index), op.error_model(args));
    CAPTURE(args.key(), decl.name, c.worst_ratio, c.worst_index, c.max_abs_error, c.nonfinite);
    CHECK(c.nonfinite == 0);
    CHECK(c.violations == 0);
    worst = std::max(worst, c.worst_ratio);
  }
  return worst;
}

}  // namespace tokamax::testing
