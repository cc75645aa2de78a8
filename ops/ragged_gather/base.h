// ragged_gather: the math spec (binding, validation, counts, inputs, reference and oracle).
//
// Dimensions.
//   in     rows of x
//   out    entries of indices (rows of the output)
//   h      elements per row (hidden)
//
// out[i] = x[indices[i]] for i in [start, end) (0 <= start <= end <= out): the MoE dispatch,
// tokens copied into their experts' rows. The output rows outside [start, end) are unspecified
// (the kernels leave them as they were) and never compared. x may have any dtype: rows are
// copied, not converted. indices[start, end) must be rows of x (the API checks the values);
// the entries outside the range are never read.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// The parsed, validated view of ragged_gather's BoundArgs that implementations work with.
struct RaggedGatherProblem {
  static constexpr std::string_view kOp = "ragged_gather";
  static constexpr std::string_view kSummary =
      "out[i] = x[indices[i]] for i in [start, end), rows of any dtype (the MoE dispatch)";
  int64_t in = 0, out = 0, h = 0;
  int64_t start = 0, end = 0;
  DType dtype = DType::kF32;

  int64_t row_bytes() const { return h * static_cast<int64_t>(dtype_size(dtype)); }
  static RaggedGatherProblem from(const BoundArgs& args);
};

class RaggedGatherOp : public ProblemOp<RaggedGatherProblem> {
 public:
  // Rows [start, end) of out.
  std::pair<int64_t, int64_t> defined_range(const BoundArgs& args,
                                            const TensorDecl& output) const override;
};

// The portable reference: one std::copy per gathered row (what a user writes first).
void ragged_gather_reference(const RaggedGatherProblem& problem,
                             // Inputs.
                             const Tensor& x,        // [in, h]
                             const Tensor& indices,  // [out] i32
                             // Outputs.
                             Tensor& out);  // [out, h], rows [start, end) written

}  // namespace tokamax
