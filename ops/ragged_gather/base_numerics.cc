// ragged_gather: seeded inputs, the oracle's cost and the error model (exact: rows are copies).
#include <cmath>

#include "ops/framework/random.h"
#include "ops/ragged_gather/base.h"

namespace tokamax {

// x ~ N(0, 1) in its dtype (integers: N(0, 40^2), rounded; bool: mostly true); indices uniform
// over x's rows at every entry (upstream's RangedArrayInitializer), so rows repeat.
template <>
TensorMap ProblemOp<RaggedGatherProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  const RaggedGatherProblem p = RaggedGatherProblem::from(args);
  const bool integer = p.dtype == DType::kI8 || p.dtype == DType::kI32;
  TensorMap inputs;
  inputs.emplace("x", normal_tensor(args.tensor("x"), seed, "x", integer ? 40.0 : 1.0));
  Tensor indices(args.tensor("indices"));
  const uint64_t stream = stream_id("indices");
  for (int64_t i = 0; i < p.out; ++i) {
    const double u = uniform01(seed, stream, static_cast<uint64_t>(i));
    indices.data<int32_t>()[i] = static_cast<int32_t>(std::floor(u * static_cast<double>(p.in)));
  }
  inputs.emplace("indices", std::move(indices));
  return inputs;
}

template <>
double ProblemOp<RaggedGatherProblem>::oracle_cost_per_output(const BoundArgs&) const {
  return 1.0;  // one element read
}

template <>
ErrorModel ProblemOp<RaggedGatherProblem>::error_model(const BoundArgs&) const {
  // A copy: every implementation must give x's elements exactly.
  return ErrorModel{};
}

}  // namespace tokamax
