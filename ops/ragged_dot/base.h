// ragged_dot: the math spec (binding, validation, counts, inputs, reference and oracle).
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// The parsed, validated view of ragged_dot's BoundArgs that implementations work with.
struct RaggedDotProblem {
  static constexpr std::string_view kOp = "ragged_dot";
  int64_t G = 0, M = 0, K = 0, N = 0;
  DType lhs_dtype = DType::kF32;
  DType rhs_dtype = DType::kF32;
  DType out_dtype = DType::kF32;      // preferred_element_type
  std::vector<int64_t> group_sizes;   // [G]
  std::vector<int64_t> group_starts;  // [G + 1] prefix sums; group_starts[G] = rows

  int64_t rows() const { return group_starts.back(); }
  static RaggedDotProblem from(const BoundArgs& args);
};

// Splits `total` rows over `num_groups` groups at random (reproducible from the seed), some
// groups possibly empty, as upstream catalogs do for MoE routing.
std::vector<int64_t> random_group_sizes(int64_t num_groups, int64_t total, uint64_t seed);
// Splits `total` rows as evenly as possible; the first total % num_groups groups get one more.
std::vector<int64_t> even_group_sizes(int64_t num_groups, int64_t total);

class RaggedDotOp : public Op {
 public:
  std::string_view name() const override { return RaggedDotProblem::kOp; }
  std::string_view summary() const override {
    return "grouped matmul: rows of lhs[M,K] in group g times rhs[g] of rhs[G,K,N]";
  }
  BoundArgs bind(const nlohmann::json& args) const override;
  std::vector<TensorDecl> inputs(const BoundArgs& args) const override;
  std::vector<TensorDecl> outputs(const BoundArgs& args) const override;
  double flops(const BoundArgs& args) const override;
  double bytes(const BoundArgs& args) const override;
  TensorMap make_inputs(const BoundArgs& args, uint64_t seed) const override;
  OracleSample oracle(const BoundArgs& args, const TensorMap& inputs, std::string_view output,
                      std::span<const int64_t> index) const override;
  double oracle_cost_per_output(const BoundArgs& args) const override;
  ErrorModel error_model(const BoundArgs& args) const override;
  std::vector<const Implementation*> implementations() const override;
};

// The portable reference: every dtype combination, accumulating in `Acc`. With Acc = double it
// computes the float64 oracle of the whole output.
template <typename Acc>
void ragged_dot_reference(const RaggedDotProblem& problem,
                          // Inputs.
                          const Tensor& lhs,  // [M, K]
                          const Tensor& rhs,  // [G, K, N]
                          // Outputs.
                          Tensor& out);  // [M, N] out_dtype

}  // namespace tokamax
