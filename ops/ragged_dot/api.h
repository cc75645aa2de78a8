// ragged_dot: the high-level entry point, tokamax::ragged_dot(lhs, rhs, group_sizes, options).
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens)
//   K      contraction extent
//   N      columns of rhs (output features; N / 2 with fuse_gateup_activation)
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "ops/framework/dtype.h"
#include "ops/framework/tensor.h"
#include "ops/ragged_dot/base.h"

namespace tokamax {

class ApiCall;  // ops/framework/dispatch.h

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const RaggedDotOp& ragged_dot_op();

struct RaggedDotOptions {
  // "auto" picks the first implementation supported on this machine for these args, falling back
  // on NotImplemented; a name ("cpu", "reference") runs exactly that one or throws.
  std::string implementation = "auto";
  std::optional<DType> preferred_element_type;  // default: the inputs' common type (upstream's)
  std::optional<nlohmann::json> config;         // explicit config (needs a named implementation)
  // Upstream's epilogue arguments (ops/ragged_dot/base.h): group_sizes then holds at least
  // group_offset + G entries and the rows of groups outside [group_offset, group_offset + G)
  // are zero; rhs_bias [G, N] is added to the product; then `activation`, or act(gate) * up
  // with rhs = [gate | up] along N.
  std::optional<int64_t> group_offset;
  const Tensor* rhs_bias = nullptr;
  Activation activation = Activation::kNone;
  GateUp fuse_gateup_activation = GateUp::kNone;
  SituGlu situ = {};  // kSitu's beta and linear_beta (0: none)
  // Upstream's precision (ops/common/precision.h, docs/precision.md).
  DotPrecision precision = DotPrecision::kDefault;
};

// out[M, N] (N / 2 with a fused gate/up): rows of group g of lhs times rhs[g]; rows past
// sum(group_sizes) are zero.
// Throws InvalidArgument naming the argument when shapes or sizes disagree.
Tensor ragged_dot(const Tensor& lhs,          // [M, K]
                  const Tensor& rhs,          // [G, K, N]
                  const Tensor& group_sizes,  // [G] i32 ([>= group_offset + G])
                  const RaggedDotOptions& options = {});

// upstream's ragged_dot_general: the same op with its dimension numbers (base.h, RaggedDims):
// kTransRhs takes rhs [G, N, K]; kRaggedContracting takes lhs [K, M] and rhs [K, N] with the
// groups over K and returns [G, M, N]. Only the plain product (the options' implementation,
// preferred_element_type and config; the others throw InvalidArgument naming them).
Tensor ragged_dot_general(const Tensor& lhs, const Tensor& rhs, const Tensor& group_sizes,
                          RaggedDims dimension_numbers, const RaggedDotOptions& options = {});

// Adds lhs, rhs, group_sizes (checked to be i32[G]: its values are part of the binding) and the
// options shared with the VJP to a call of `op` (this op or its VJP).
void add_ragged_dot_arguments(ApiCall& call, std::string_view op, const Tensor& lhs,
                              const Tensor& rhs, const Tensor& group_sizes,
                              std::optional<DType> preferred_element_type,
                              std::optional<int64_t> group_offset);

}  // namespace tokamax
