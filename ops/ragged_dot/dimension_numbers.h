// ragged_dot's dimension numbers (RaggedDims, base.h) in binding: the spellings upstream uses,
// the operand shapes each form reads, and the arguments the other forms refuse.
//
// Dimensions: as base.h.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "ops/framework/tensor.h"
#include "ops/ragged_dot/base.h"

namespace tokamax {

// The form `args` asks for: kDefault when ragged_dot_dimension_numbers is absent or null.
RaggedDims bind_ragged_dims(const nlohmann::json& args);

// The extents lhs and rhs give under `dims`; rhs_K is rhs's contraction extent (checked against
// K by the caller). G is rhs's groups, or for kRaggedContracting the number of group sizes
// (a list's length or {num_groups: G, ...}): InvalidArgument naming group_sizes when absent.
struct RaggedExtents {
  int64_t M = 0, K = 0, G = 0, N = 0, rhs_K = 0;
};
RaggedExtents ragged_extents(RaggedDims dims, const TensorSpec& lhs, const TensorSpec& rhs,
                             const nlohmann::json& args);

// The other forms take a plain grouped product: InvalidArgument naming the first argument of
// `args` beyond one (group_offset, rhs_bias, activation, fuse_gateup_activation, rhs_scale,
// maybe_quantize_lhs, zero_initialize = false, a precision other than default).
void require_plain_form(RaggedDims dims, const nlohmann::json& args);

}  // namespace tokamax
