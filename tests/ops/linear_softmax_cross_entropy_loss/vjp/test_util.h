// Shared by the linear_softmax_cross_entropy_loss_vjp tests: binding a case, and the generic
// runner and oracle check of tests/ops/vjp_test_util.h bound to this op.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "ops/linear_softmax_cross_entropy_loss/vjp/api.h"
#include "tests/ops/vjp_test_util.h"

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

inline TensorMap run_lsce_vjp(const Implementation& impl, const BoundArgs& args,
                              const TensorMap& inputs, const nlohmann::json& config) {
  return run_with_nan_outputs(linear_softmax_cross_entropy_loss_vjp_op(), impl, args, inputs,
                              config);
}

inline double check_lsce_vjp_outputs(const BoundArgs& args, const TensorMap& inputs,
                                     const TensorMap& outputs) {
  return check_outputs_against_oracle(linear_softmax_cross_entropy_loss_vjp_op(), args, inputs,
                                      outputs);
}

}  // namespace tokamax::testing
