// Shared by the ragged_dot_vjp tests: the generic runner and oracle check of
// tests/ops/vjp_test_util.h bound to ragged_dot_vjp.
#pragma once

#include <nlohmann/json.hpp>

#include "ops/ragged_dot/vjp/api.h"
#include "tests/ops/vjp_test_util.h"

namespace tokamax::testing {

inline TensorMap run_ragged_dot_vjp(const Implementation& impl, const BoundArgs& args,
                                    const TensorMap& inputs, const nlohmann::json& config) {
  return run_with_nan_outputs(ragged_dot_vjp_op(), impl, args, inputs, config);
}

inline double check_ragged_dot_vjp_outputs(const BoundArgs& args, const TensorMap& inputs,
                                           const TensorMap& outputs) {
  return check_outputs_against_oracle(ragged_dot_vjp_op(), args, inputs, outputs);
}

}  // namespace tokamax::testing
