// ragged_gather_reduce: high-level API and the dispatch order of its implementations.
#include "ops/ragged_gather_reduce/api.h"

#include <string>

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& ragged_gather_reduce_cpu_implementation();
const Implementation& ragged_gather_reduce_reference_implementation();

// Fastest first.
template <>
std::vector<const Implementation*> ProblemOp<RaggedGatherReduceProblem>::implementations() const {
  return {&ragged_gather_reduce_cpu_implementation(),
          &ragged_gather_reduce_reference_implementation()};
}

const RaggedGatherReduceOp& ragged_gather_reduce_op() {
  static const RaggedGatherReduceOp op;
  return op;
}

Tensor ragged_gather_reduce(const Tensor& x, const Tensor& indices, const Tensor& topk_weights,
                            const Tensor& valid_rows_mask, int64_t reduce_group_size,
                            const RaggedGatherReduceOptions& options) {
  ApiCall call(ragged_gather_reduce_op());
  call.tensor("x", x)
      .tensor("indices", indices)
      .tensor("topk_weights", topk_weights)
      .tensor("valid_rows_mask", valid_rows_mask)
      .option("reduce_group_size", reduce_group_size);
  const BoundArgs args = call.bind();
  // The values bind cannot see: every valid route must read a row of x.
  const RaggedGatherReduceProblem p = RaggedGatherReduceProblem::from(args);
  const int32_t* rows = indices.data<int32_t>();
  const bool* valid = valid_rows_mask.data<bool>();
  for (int64_t r = 0; r < p.I; ++r) {
    if (valid[r] && (rows[r] < 0 || rows[r] >= p.R)) {
      throw InvalidArgument(
          "ragged_gather_reduce: indices[" + std::to_string(r) + "] = " + std::to_string(rows[r]) +
              " (a valid route) is not a row of x (num_rows = " + std::to_string(p.R) + ")",
          "indices");
    }
  }
  return call.run(args, options.implementation, options.config).at("out");
}

}  // namespace tokamax
