// ragged_dot and ragged_dot_vjp: the float64 oracles, by either method of ops/common/f64_dot.h
// (Op::oracle runs kBlocked; the tests compare it with kLoop, the plain scalar loop).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "ops/common/f64_dot.h"
#include "ops/framework/op.h"
#include "ops/framework/tensor.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/vjp/base.h"

namespace tokamax {

// The oracle of `out` at flat indices `index` (RaggedDotOp::oracle with a chosen method).
OracleSample ragged_dot_oracle(const BoundArgs& args, const TensorMap& inputs,
                               std::span<const int64_t> index, OracleMethod method);

// The oracle of `out` for the dimension numbers other than the default (oracle_general.cc).
OracleSample ragged_dot_general_oracle(const RaggedDotProblem& problem, const TensorMap& inputs,
                                       std::span<const int64_t> index);

// The oracle of dlhs or drhs (RaggedDotVjpOp::oracle with a chosen method).
OracleSample ragged_dot_vjp_oracle(const BoundArgs& args, const TensorMap& inputs,
                                   std::string_view output, std::span<const int64_t> index,
                                   OracleMethod method);

}  // namespace tokamax
