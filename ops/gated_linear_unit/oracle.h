// gated_linear_unit and gated_linear_unit_vjp: the float64 oracles, by either method of
// ops/common/f64_dot.h (Op::oracle runs kBlocked; the tests compare it with kLoop).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "ops/common/f64_dot.h"
#include "ops/common/f64_matrix.h"
#include "ops/framework/op.h"
#include "ops/framework/tensor.h"
#include "ops/gated_linear_unit/base.h"

namespace tokamax {

// The oracle of `out` at flat indices `index` (GatedLinearUnitOp::oracle with a chosen method).
OracleSample gated_linear_unit_oracle(const BoundArgs& args, const TensorMap& inputs,
                                      std::span<const int64_t> index, OracleMethod method);

// The oracle of dx, dweights (or dgate_weights, dproj_weights): GatedLinearUnitVjpOp::oracle with
// a chosen method.
OracleSample gated_linear_unit_vjp_oracle(const BoundArgs& args, const TensorMap& inputs,
                                          std::string_view output, std::span<const int64_t> index,
                                          OracleMethod method);

// Wg (part 0) or Wp (part 1) in f64: [K, N], or transposed [N, K] (K-contiguous rows, the
// operand of x Wg).
F64Matrix glu_weight_f64(const GluProblem& p, const TensorMap& inputs, int part, bool transposed);

}  // namespace tokamax
