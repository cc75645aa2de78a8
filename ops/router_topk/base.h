// router_topk: the math spec (binding, validation, counts, inputs, reference and oracle).
//
// Dimensions.
//   T      tokens (rows of scores)
//   E      experts (columns)
//   k      experts selected per token, 1 <= k <= E
//
// Upstream's sort-free MoE router top-k (tokamax 0.0.17, ops/router_topk/reference.py): scores
// are read as f32 and clamped up to kRouterFloor (NaN, -inf and every score <= it count as it);
// k passes of (row max -> lowest column attaining it -> mask it out) give weights[t, j] (the
// j-th largest clamped score, f32) and indices[t, j] (its expert; equal scores to the lower
// expert). A row whose largest clamped score is kRouterFloor (no real score) gets NaN weights
// and experts 0..k-1.
#pragma once

#include <cstdint>
#include <string_view>

#include "ops/common/row_select.h"
#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// Upstream's clamp floor (reference.NEG), as the f32 the comparison uses: below any real routing
// score, above -FLT_MAX (which upstream's passes use to mask a selected expert out).
inline constexpr float kRouterFloor = -3.0e38f;

// The parsed, validated view of router_topk's BoundArgs that implementations work with.
struct RouterTopKProblem {
  static constexpr std::string_view kOp = "router_topk";
  static constexpr std::string_view kSummary =
      "MoE routing: the k largest of each row of scores[T,E] (f32/bf16/f16) as f32 weights and "
      "expert indices, ties to the lower expert, NaN/-inf never over a real score";
  int64_t T = 0, E = 0, k = 1;
  DType dtype = DType::kF32;

  static RouterTopKProblem from(const BoundArgs& args);
};

using RouterTopKOp = ProblemOp<RouterTopKProblem>;

// A score as the selection sees it: f32, clamped up to kRouterFloor (NaN included).
inline float router_clamp(float score) { return score > kRouterFloor ? score : kRouterFloor; }

// The portable reference: upstream's algorithm as a plain loop, k passes over each row.
void router_topk_reference(const RouterTopKProblem& problem,
                           // Inputs.
                           const Tensor& scores,  // [T, E] f32, bf16 or f16
                           // Outputs.
                           Tensor& weights,   // [T, k] f32
                           Tensor& indices);  // [T, k] i32

}  // namespace tokamax
