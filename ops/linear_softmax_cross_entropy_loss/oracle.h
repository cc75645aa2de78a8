// linear_softmax_cross_entropy_loss and its VJP: the float64 oracles, by either method of
// ops/common/f64_dot.h (Op::oracle runs kBlocked; the tests compare it with kLoop).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "ops/common/f64_dot.h"
#include "ops/framework/op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// The oracle of `loss` at flat indices `index` (the forward op's oracle with a chosen method).
OracleSample linear_softmax_cross_entropy_oracle(const BoundArgs& args, const TensorMap& inputs,
                                                 std::span<const int64_t> index,
                                                 OracleMethod method);

// The oracle of the residual lse at rows `index` (return_residuals: every row's log-sum-exp).
OracleSample linear_softmax_cross_entropy_lse_oracle(const BoundArgs& args,
                                                     const TensorMap& inputs,
                                                     std::span<const int64_t> index,
                                                     OracleMethod method);

// The oracle of dx or dw (the VJP op's oracle with a chosen method).
OracleSample linear_softmax_cross_entropy_vjp_oracle(const BoundArgs& args, const TensorMap& inputs,
                                                     std::string_view output,
                                                     std::span<const int64_t> index,
                                                     OracleMethod method);

}  // namespace tokamax
