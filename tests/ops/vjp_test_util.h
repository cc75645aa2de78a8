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

}  // namespace tokamax::testing
