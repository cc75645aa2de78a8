// top_k: the math spec (binding, validation, counts, inputs, reference and oracle).
//
// Dimensions.
//   b      rows of scores
//   n      columns of scores (candidates per row)
//   k      selected per row, 1 <= k <= n
//   len    a row's eligible prefix: clip(row_lengths[r], 0, n), or n without row_lengths
//
// indices[r, j] is the column of the j-th largest eligible score of row r: among the columns
// c < len whose score is > -inf (NaN never is), in descending score order, equal scores in
// ascending column order (+0.0 above -0.0, the total order of XLA's top_k); -1 past the
// eligible count. scores may be f32 or
// i32 holding f32 bits; with return_scores, scores_bits[r, j] holds the selected score's f32
// bits (-inf's bits past the eligible count), as upstream's SparseCore top-k returns them.
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

// The parsed, validated view of top_k's BoundArgs that implementations work with.
struct TopKProblem {
  static constexpr std::string_view kOp = "top_k";
  static constexpr std::string_view kSummary =
      "the k largest of each row of scores[b,n] (below row_lengths, > -inf): column indices, "
      "descending, ties to the lower column, -1 past the eligible count";
  int64_t b = 0, n = 0, k = 1;
  DType scores_dtype = DType::kF32;  // kF32, or kI32 holding f32 bits
  bool has_row_lengths = false;
  bool return_scores = false;

  static TopKProblem from(const BoundArgs& args);
};

using TopKOp = ProblemOp<TopKProblem>;

// The portable reference: a loop over rows, each selected by std::partial_sort of its eligible
// columns. `row_lengths` and `scores_bits` may be null (absent).
void top_k_reference(const TopKProblem& problem,
                     // Inputs.
                     const Tensor& scores,       // [b, n] f32 or i32 (f32 bits)
                     const Tensor* row_lengths,  // [b] i32 or null
                     // Outputs.
                     Tensor& indices,       // [b, k] i32
                     Tensor* scores_bits);  // [b, k] i32 or null

}  // namespace tokamax
