// ragged_dot: the math spec (binding, validation, counts, inputs, reference and oracle).
//
// Dimensions.
//   G      groups (experts) of rhs: the groups this call owns
//   Gt     entries of group_sizes: Gt >= group_offset + G (Gt = G without a group_offset)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      columns of rhs; the output has N columns, or N / 2 with fuse_gateup_activation
//   rows   sum(group_sizes) <= M; output rows past it are zero
// With ragged_dot_dimension_numbers = ragged_contracting the groups split K instead (rows:
// sum(group_sizes) <= K) and G is the number of group sizes (RaggedDims below).
//
// Quantized weights (upstream's gmm_v2): rhs i8 or f8e4m3 with rhs_scale f32[G, N] or
// f32[G, K / b, N]; maybe_quantize_lhs quantizes lhs per row and K block to rhs's type.
//
// Upstream's epilogue arguments (RaggedDot.bind): group_offset (the rows of group
// group_offset + g are multiplied by rhs[g]; rows of groups outside [group_offset,
// group_offset + G) are zero), rhs_bias [G, N] added to the product, then either `activation`
// applied to it or `fuse_gateup_activation`: rhs holds [gate | up] along N and the output is
// act(gate) * up (swigluoai, silu_and_mul_with_clamp: the clamped forms of
// ops/common/activation.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "ops/common/activation.h"
#include "ops/common/precision.h"
#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// fuse_gateup_activation: the activation of act(gate) * up, or none. Upstream's names (gmm_v2):
// silu, gelu (jax.nn.gelu's default, the tanh approximation; gelu_tanh is read as gelu),
// swigluoai and silu_and_mul_with_clamp (the clamped forms of ops/common/activation.h),
// situ:<beta>:<linear_beta | none> (situ_glu there, with its parameters); gelu_erf is the exact
// gelu.
enum class GateUp { kNone, kSilu, kGelu, kGeluErf, kSwigluOai, kSiluClamped, kSitu };
// The form's name ("situ" without its parameters).
std::string_view gate_up_name(GateUp gate_up);
// The canonical spelling of a form: its name, or for kSitu "situ:<beta>:<linear_beta | none>"
// with the shortest decimals that read back to the parameters.
std::string gate_up_spelling(GateUp gate_up, const SituGlu& situ = {});
// Throws InvalidArgument (naming fuse_gateup_activation) listing the accepted names, or saying
// what is wrong with situ's parameters; `situ` (may be null) receives them.
GateUp parse_gate_up(std::string_view name, SituGlu* situ = nullptr);
// The clamped form of a gate-up activation, or null.
constexpr const ClampedGlu* clamped_form(GateUp gate_up) {
  return gate_up == GateUp::kSwigluOai     ? &kSwigluOai
         : gate_up == GateUp::kSiluClamped ? &kSiluClamped
                                           : nullptr;
}
// The activation applied to the gate (the clamped forms: silu's shape, sigmoid(alpha x) x;
// kNone: none).
constexpr Activation gate_activation(GateUp gate_up) {
  switch (gate_up) {
    case GateUp::kSilu:
    case GateUp::kSwigluOai:
    case GateUp::kSiluClamped:
    case GateUp::kSitu:
      return Activation::kSilu;
    case GateUp::kGelu:
      return Activation::kGeluTanh;
    case GateUp::kGeluErf:
      return Activation::kGelu;
    case GateUp::kNone:
      break;
  }
  return Activation::kNone;
}
// The combine cpu_biased_glu_row applies for a form (`situ`: kSitu's parameters).
inline GluForm glu_form(GateUp gate_up, const SituGlu& situ) {
  return {.clamped = clamped_form(gate_up), .situ = gate_up == GateUp::kSitu ? &situ : nullptr};
}
// act(gate) * up in `T` (clamped_glu, situ_glu for those forms); kNone returns gate.
template <typename T>
T apply_gate_up(GateUp gate_up, const SituGlu& situ, T gate, T up) {
  if (gate_up == GateUp::kNone) return gate;
  if (const ClampedGlu* form = clamped_form(gate_up)) return clamped_glu(*form, gate, up);
  if (gate_up == GateUp::kSitu) return situ_glu(situ, gate, up);
  return apply_activation(gate_activation(gate_up), gate) * up;
}

// ragged_dot_dimension_numbers: upstream's three (ragged_dot/base.py). kDefault: lhs [M, K]
// ragged along M, rhs [G, K, N], out [M, N]. kTransRhs: rhs [G, N, K] (each group's weights
// stored transposed). kRaggedContracting: lhs [K, M] and rhs [K, N] ragged along the
// contraction, out [G, M, N] with out[g] = lhs_g^T rhs_g over group g's rows of K (the weight
// gradient as a forward op); rows of K past the groups' sum take part in no product.
enum class RaggedDims { kDefault, kTransRhs, kRaggedContracting };
// "default", "trans_rhs", "ragged_contracting".
std::string_view ragged_dims_name(RaggedDims dims);
// A name above, or upstream's structure {dot_dimension_numbers: [[[1], [1]], [[], []]],
// lhs_ragged_dimensions: [0], rhs_group_dimensions: [0]} (lax.RaggedDotDimensionNumbers) equal
// to one of the three; InvalidArgument naming ragged_dot_dimension_numbers otherwise.
RaggedDims parse_ragged_dims(const nlohmann::json& value);

// The parsed, validated view of ragged_dot's BoundArgs that implementations work with.
struct RaggedDotProblem {
  static constexpr std::string_view kOp = "ragged_dot";
  static constexpr std::string_view kSummary =
      "grouped matmul: rows of lhs[M,K] in group g times rhs[g] of rhs[G,K,N]";
  int64_t G = 0, M = 0, K = 0, N = 0;
  DType lhs_dtype = DType::kF32;
  DType rhs_dtype = DType::kF32;
  DType out_dtype = DType::kF32;      // preferred_element_type
  std::vector<int64_t> group_sizes;   // [G] the owned groups' sizes
  std::vector<int64_t> group_starts;  // [G + 1] their first rows; group_starts[G] = rows
  // The epilogue arguments (defaults: a plain grouped matmul).
  int64_t group_offset = 0;
  std::vector<int64_t> all_group_sizes;  // [Gt] group_sizes as given
  bool has_bias = false;                 // rhs_bias [G, N]
  DType bias_dtype = DType::kF32;
  Activation activation = Activation::kNone;
  GateUp gate_up = GateUp::kNone;
  SituGlu situ;  // kSitu's parameters
  // Quantized weights: rhs_dtype i8 / f8e4m3 with rhs_scale [G, scale_blocks, N] (scale_blocks
  // = 1: [G, N]); rhs[g, k, n] means rhs[g, k, n] * rhs_scale[g, k / block_k(), n].
  DType scale_dtype = DType::kF32;
  int64_t scale_blocks = 1;
  // maybe_quantize_lhs: each row's K block b of lhs quantized to rhs's type (quantize.h:
  // int8, s = max|lhs[m, b]| / 127 and q = round(lhs / s); e4m3, s = max / 448), the product
  // taken of s * q.
  bool quantize_lhs = false;
  // false (upstream's zero_initialize=False): rows outside the owned groups' [first_row(),
  // rows()) are left as they were, not zeroed (the harness allocates outputs zeroed, so verify
  // still reads zeros there).
  bool zero_initialize = true;
  // Upstream's `precision` (ops/common/precision.h): default multiplies the operands as given.
  DotPrecision precision = DotPrecision::kDefault;
  // The other dimension numbers take a plain grouped product only (bind refuses the epilogue,
  // quantization, group_offset, zero_initialize=false and precision with them). With
  // kRaggedContracting the groups split K: group_starts are rows of K, M and N the output's.
  RaggedDims dims = RaggedDims::kDefault;

  bool quantized() const { return is_quantized(rhs_dtype); }
  int64_t block_k() const { return K / scale_blocks; }

  // Rows of the owned groups: [first_row(), rows()).
  int64_t first_row() const { return group_starts.front(); }
  int64_t rows() const { return group_starts.back(); }
  int64_t owned_rows() const { return rows() - first_row(); }
  bool owns(int64_t row) const { return row >= first_row() && row < rows(); }
  // The owned group holding `row` (owns(row)).
  int64_t group_of(int64_t row) const {
    return std::upper_bound(group_starts.begin(), group_starts.end(), row) - group_starts.begin() -
           1;
  }
  // Columns of the output.
  int64_t out_N() const { return gate_up == GateUp::kNone ? N : N / 2; }
  bool has_epilogue() const {
    return has_bias || activation != Activation::kNone || gate_up != GateUp::kNone;
  }
  // How the operands are multiplied (identity() for the default precision).
  PrecisionPlan precision_plan() const { return plan_precision(precision, lhs_dtype, rhs_dtype); }
  // The problem the kernels multiply: with a precision that expands the operands, K is P K and
  // lhs and rhs are the pieces' dtype (expand_precision_operands makes its inputs); else this.
  RaggedDotProblem computed() const;
  // The arguments beyond a plain grouped matmul this problem uses, comma-separated ("" for
  // none): what an implementation without them names when it declines.
  std::string extended_arguments() const;
  static RaggedDotProblem from(const BoundArgs& args);
};

// Throws NotImplemented("<impl>: <arguments> not supported ...") when `problem` uses an argument
// beyond a plain grouped matmul; for implementations that have none of them.
void require_plain_ragged_dot(const RaggedDotProblem& problem, std::string_view impl);

// lhs and rhs expanded for the problem's precision (precision.h: pieces side by side along K), the
// inputs of problem.computed(); `inputs` unchanged when the precision is the identity.
TensorMap expand_precision_operands(const RaggedDotProblem& problem, const TensorMap& inputs);

// Splits `total` rows over `num_groups` groups at random (reproducible from the seed), some
// groups possibly empty, as upstream catalogs do for MoE routing.
std::vector<int64_t> random_group_sizes(int64_t num_groups, int64_t total, uint64_t seed);
// Splits `total` rows as evenly as possible; the first total % num_groups groups get one more.
std::vector<int64_t> even_group_sizes(int64_t num_groups, int64_t total);

class RaggedDotOp : public ProblemOp<RaggedDotProblem> {
 public:
  // maybe_quantize_lhs with i8 weights multiplies int8 by int8: kI8 (the int8 dot ceiling).
  DType compute_dtype(const BoundArgs& args) const override;
  // zero_initialize=false leaves the rows outside the owned groups as they were: zeros.
  bool outputs_start_zeroed(const BoundArgs& args) const override;
};

// The portable reference: every dtype combination, accumulating in `Acc`. With Acc = double it
// computes the float64 oracle of the whole output.
template <typename Acc>
void ragged_dot_reference(const RaggedDotProblem& problem,
                          // Inputs.
                          const Tensor& lhs,  // [M, K]
                          const Tensor& rhs,  // [G, K, N]
                          // Outputs.
                          Tensor& out,  // [M, out_N] out_dtype
                          // Inputs: rhs_bias [G, N] and rhs_scale [G, (K / b,) N] when the
                          // problem has them.
                          const Tensor* bias = nullptr, const Tensor* scale = nullptr);

}  // namespace tokamax
