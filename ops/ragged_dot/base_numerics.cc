// ragged_dot: seeded inputs and group sizes, the oracle's cost and error model (the float64
// oracle itself is in oracle.cc, the reference in reference.cc).
//
// Dimensions: as base.h (G owned groups, Gt entries of group_sizes, M, K, N of rhs, out_N).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/quantize.h"

namespace tokamax {

std::vector<int64_t> even_group_sizes(int64_t num_groups, int64_t total) {
  std::vector<int64_t> sizes(static_cast<size_t>(num_groups), 0);
  for (int64_t g = 0; g < num_groups; ++g) {
    sizes[g] = total / num_groups + (g < total % num_groups ? 1 : 0);
  }
  return sizes;
}

std::vector<int64_t> random_group_sizes(int64_t num_groups, int64_t total, uint64_t seed) {
  // Sorted uniform cut points over [0, total]: a uniform random composition, which leaves some
  // groups empty and some large, like real router outputs.
  std::vector<int64_t> cuts;
  const uint64_t stream = stream_id("group_sizes");
  for (int64_t g = 0; g + 1 < num_groups; ++g) {
    cuts.push_back(static_cast<int64_t>(uniform01(seed, stream, g) * (total + 1)));
  }
  std::sort(cuts.begin(), cuts.end());
  std::vector<int64_t> sizes;
  int64_t previous = 0;
  for (int64_t cut : cuts) {
    sizes.push_back(std::min(cut, total) - previous);
    previous = std::min(cut, total);
  }
  if (num_groups > 0) sizes.push_back(total - previous);
  return sizes;
}

template <>
TensorMap ProblemOp<RaggedDotProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  TensorMap inputs;
  // Activations ~ N(0, 1); weights ~ N(0, 1/K) as after a fan-in initialisation, so outputs stay
  // O(1) at any K and low-precision outputs neither overflow nor underflow.
  Tensor lhs = normal_tensor(args.tensor("lhs"), seed, "lhs");
  const double rhs_scale = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(p.K, 1)));
  // Quantized weights: codes spread over the type's range (i8: sigma 36, |q| <= 125; f8e4m3:
  // N(0, 1)) and scales that bring the dequantized weights back to N(0, 1/K), each scale
  // different (+-17% at most) so that a wrong scale index shows.
  const double code_sigma = p.rhs_dtype == DType::kI8 ? 36.0 : 1.0;
  Tensor rhs =
      normal_tensor(args.tensor("rhs"), seed, "rhs", p.quantized() ? code_sigma : rhs_scale);
  if (p.quantized()) {
    const double base = rhs_scale / code_sigma;
    inputs.emplace("rhs_scale",
                   normal_tensor(args.tensor("rhs_scale"), seed, "rhs_scale", 0.05 * base, base));
  }
  const int64_t Gt = static_cast<int64_t>(p.all_group_sizes.size());
  Tensor group_sizes(TensorSpec{DType::kI32, {Gt}});
  for (int64_t g = 0; g < Gt; ++g)
    group_sizes.data<int32_t>()[g] = static_cast<int32_t>(p.all_group_sizes[g]);
  inputs.emplace("lhs", std::move(lhs));
  inputs.emplace("rhs", std::move(rhs));
  inputs.emplace("group_sizes", std::move(group_sizes));
  if (p.has_bias) {
    // Biases ~ N(0, 1/4): the size of a trained layer's, comparable to the product's O(1).
    inputs.emplace("rhs_bias", normal_tensor(args.tensor("rhs_bias"), seed, "rhs_bias", 0.5));
  }
  return inputs;
}

template <>
double ProblemOp<RaggedDotProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  return static_cast<double>(std::max<int64_t>(p.K, 1)) * (p.gate_up == GateUp::kNone ? 1 : 2);
}

template <>
ErrorModel ProblemOp<RaggedDotProblem>::error_model(const BoundArgs& args) const {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  ErrorModel model;
  // Products of two bf16/f16/f32 values are exact in f32 only for 16-bit inputs, so the bound
  // counts one rounding per term plus the summation: K roundings of the accumulator type.
  model.accumulation_roundoff =
      unit_roundoff(p.out_dtype == DType::kF64 ? DType::kF64 : DType::kF32);
  // A precision preset sums P products of pieces per term (P K terms), each exact in f32, and
  // rounds or splits the operands first (operand_roundoff).
  const PrecisionPlan plan = p.precision_plan();
  // ragged_contracting sums over one group's rows of K: the largest group's.
  const int64_t terms = p.dims == RaggedDims::kRaggedContracting
                            ? *std::max_element(p.group_sizes.begin(), p.group_sizes.end())
                            : p.K;
  model.accumulation_length = static_cast<double>(std::max<int64_t>(terms, 1) * plan.passes()) +
                              (p.has_epilogue() ? 2.0 : 1.0);
  model.output_roundoff = unit_roundoff(p.out_dtype);
  model.operand_roundoff = plan.operand_roundoff;
  return model;
}

}  // namespace tokamax
