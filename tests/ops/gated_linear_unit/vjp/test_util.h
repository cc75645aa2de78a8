// Shared by the gated_linear_unit_vjp tests: the generic runner and oracle check of
// tests/ops/vjp_test_util.h bound to gated_linear_unit_vjp.
#pragma once

#include <nlohmann/json.hpp>

#include "ops/gated_linear_unit/vjp/api.h"
#include "tests/ops/vjp_test_util.h"

namespace tokamax::testing {

inline TensorMap run_glu_vjp(const Implementation& impl, const BoundArgs& args,
                             const TensorMap& inputs, const nlohmann::json& config) {
  return run_with_nan_outputs(gated_linear_unit_vjp_op(), impl, args, inputs, config);
}

inline void check_glu_vjp_outputs(const BoundArgs& args, const TensorMap& inputs,
                                  const TensorMap& outputs) {
  check_outputs_against_oracle(gated_linear_unit_vjp_op(), args, inputs, outputs);
}

}  // namespace tokamax::testing
