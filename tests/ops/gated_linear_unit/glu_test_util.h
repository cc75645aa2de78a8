// Shared helper of the gated_linear_unit tests: compare an output with the float64 oracle under
// the op's error model, at every element.
#pragma once

#include <numeric>
#include <vector>

#include "ops/framework/numerics.h"
#include "ops/gated_linear_unit/api.h"

namespace tokamax::glu_testing {

// The comparison of `out` with the oracle at every output element.
inline Comparison compare_all(const BoundArgs& args, const TensorMap& inputs, const Tensor& out) {
  const GatedLinearUnitOp& op = gated_linear_unit_op();
  std::vector<int64_t> index(static_cast<size_t>(out.num_elements()));
  std::iota(index.begin(), index.end(), 0);
  return compare_to_oracle(out, op.oracle(args, inputs, "out", index), op.error_model(args));
}

}  // namespace tokamax::glu_testing
