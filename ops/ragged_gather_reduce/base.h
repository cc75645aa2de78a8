// ragged_gather_reduce: the math spec (binding, validation, counts, inputs, reference and oracle).
//
// Dimensions.
//   R      rows of x (expert outputs, in expert-major order)
//   h      elements per row (hidden)
//   I      routes (entries of indices, topk_weights, valid_rows_mask); I = T g
//   g      reduce_group_size, routes per token (the MoE top-k)
//   T      output rows (tokens)
//
// The MoE combine: out[t] = sum over the routes r in [t g, (t + 1) g) with valid_rows_mask[r]
// of topk_weights[r] * x[indices[r]], accumulated in f32 and rounded to x's dtype; a token
// without a valid route is zeros. An invalid route adds nothing, whatever its row holds (NaN
// included), and its index is never read: only valid routes' indices must be rows of x (the
// API checks the values).
#pragma once

#include <cstdint>
#include <string_view>

#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// The share of routes make_inputs marks valid, which bytes() and flops() count: what a kernel
// that skips invalid routes must move and compute on those inputs.
inline constexpr double kGeneratedValidFraction = 0.875;

// The parsed, validated view of ragged_gather_reduce's BoundArgs that implementations work with.
struct RaggedGatherReduceProblem {
  static constexpr std::string_view kOp = "ragged_gather_reduce";
  static constexpr std::string_view kSummary =
      "out[t] = sum of topk_weights[r] * x[indices[r]] over token t's valid routes r, in f32 "
      "(the MoE combine)";
  int64_t R = 0, h = 0, I = 0, g = 1;
  DType x_dtype = DType::kF32;
  DType weights_dtype = DType::kF32;

  int64_t T() const { return I / g; }
  static RaggedGatherReduceProblem from(const BoundArgs& args);
};

using RaggedGatherReduceOp = ProblemOp<RaggedGatherReduceProblem>;

// The portable reference: per token, per valid route, per element, an f32 multiply-add (the
// loops a user writes first).
void ragged_gather_reduce_reference(const RaggedGatherReduceProblem& problem,
                                    // Inputs.
                                    const Tensor& x,                // [R, h]
                                    const Tensor& indices,          // [I] i32
                                    const Tensor& topk_weights,     // [I]
                                    const Tensor& valid_rows_mask,  // [I] bool
                                    // Outputs.
                                    Tensor& out);  // [T, h]

}  // namespace tokamax
