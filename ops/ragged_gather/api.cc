// ragged_gather: high-level API and the dispatch order of its implementations.
#include "ops/ragged_gather/api.h"

#include <string>

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& ragged_gather_cpu_implementation();
const Implementation& ragged_gather_reference_implementation();

// Fastest first.
template <>
std::vector<const Implementation*> ProblemOp<RaggedGatherProblem>::implementations() const {
  return {&ragged_gather_cpu_implementation(), &ragged_gather_reference_implementation()};
}

const RaggedGatherOp& ragged_gather_op() {
  static const RaggedGatherOp op;
  return op;
}

Tensor ragged_gather(const Tensor& x, const Tensor& indices, int64_t start, int64_t end,
                     const RaggedGatherOptions& options) {
  ApiCall call(ragged_gather_op());
  call.tensor("x", x).tensor("indices", indices).option("start", start).option("end", end);
  const BoundArgs args = call.bind();
  // The values bind cannot see: every index the range reads must be a row of x.
  const RaggedGatherProblem p = RaggedGatherProblem::from(args);
  const int32_t* rows = indices.data<int32_t>();
  for (int64_t i = p.start; i < p.end; ++i) {
    if (rows[i] < 0 || rows[i] >= p.in) {
      throw InvalidArgument("ragged_gather: indices[" + std::to_string(i) +
                                "] = " + std::to_string(rows[i]) +
                                " is not a row of x (in_size = " + std::to_string(p.in) + ")",
                            "indices");
    }
  }
  return call.run(args, options.implementation, options.config).at("out");
}

}  // namespace tokamax
