// ragged_gather_reduce: seeded inputs, the oracle's cost and the error model.
#include <cmath>

#include "ops/framework/random.h"
#include "ops/ragged_gather_reduce/base.h"

namespace tokamax {

// x ~ N(0, 1) and topk_weights uniform in [0, 1) (upstream's test inputs), each in its dtype;
// indices uniform over x's rows (rows repeat, as upstream's RangedArrayInitializer gives them);
// a route is valid with probability kGeneratedValidFraction, and an invalid route's index is -1,
// which no implementation may read.
template <>
TensorMap ProblemOp<RaggedGatherReduceProblem>::make_inputs(const BoundArgs& args,
                                                            uint64_t seed) const {
  const RaggedGatherReduceProblem p = RaggedGatherReduceProblem::from(args);
  TensorMap inputs;
  inputs.emplace("x", normal_tensor(args.tensor("x"), seed, "x"));
  Tensor indices(args.tensor("indices"));
  Tensor weights(args.tensor("topk_weights"));
  Tensor valid(args.tensor("valid_rows_mask"));
  const uint64_t rows = stream_id("indices"), weight = stream_id("topk_weights"),
                 validity = stream_id("valid_rows_mask");
  for (int64_t r = 0; r < p.I; ++r) {
    const auto i = static_cast<uint64_t>(r);
    const bool is_valid = uniform01(seed, validity, i) < kGeneratedValidFraction;
    valid.data<bool>()[r] = is_valid;
    indices.data<int32_t>()[r] =
        is_valid
            ? static_cast<int32_t>(std::floor(uniform01(seed, rows, i) * static_cast<double>(p.R)))
            : -1;
    weights.set(r, uniform01(seed, weight, i));
  }
  inputs.emplace("indices", std::move(indices));
  inputs.emplace("topk_weights", std::move(weights));
  inputs.emplace("valid_rows_mask", std::move(valid));
  return inputs;
}

template <>
double ProblemOp<RaggedGatherReduceProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  return static_cast<double>(args.option("reduce_group_size").get<int64_t>());  // g products
}

template <>
ErrorModel ProblemOp<RaggedGatherReduceProblem>::error_model(const BoundArgs& args) const {
  // The f32 sum of g products (each rounded, or fused into its add: g + 1 roundings bound
  // both), rounded once to x's dtype. The operands are exact in f32.
  const RaggedGatherReduceProblem p = RaggedGatherReduceProblem::from(args);
  return ErrorModel{.accumulation_roundoff = unit_roundoff(DType::kF32),
                    .accumulation_length = static_cast<double>(p.g + 1),
                    .output_roundoff = unit_roundoff(p.x_dtype)};
}

}  // namespace tokamax
