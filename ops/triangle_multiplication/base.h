// triangle_multiplication: the math spec (binding, validation, counts, inputs, reference and
// oracle).
//
// Dimensions.
//   N      residues: x is the pair representation [N, N, C]
//   C      input channels
//   H      channels of the triangle product (the projections' width)
//   D      output channels
//   P      pair positions, N * N (position p = i N + k)
//
// AlphaFold's triangle multiplicative update (Jumper et al. 2021, Supplementary Algorithms 11
// and 12) with the semantics of upstream Tokamax's triangle_multiplication (0.0.17, base.py
// _fwd):
//   a      = layer_norm(x) over C (layernorm_in_scale / offset, epsilon)
//   v      = sigmoid(a gate_in) * (a projection_in) * mask       [P, 2, H]: left and right
//   act    = outgoing: act[i, j, h] = sum_k left[i, k, h] right[j, k, h]
//            incoming: act[i, j, h] = sum_k left[k, j, h] right[k, i, h]
//   out    = (layer_norm(act) over H (layernorm_out_*) projection_out) * sigmoid(a gate_out)
// in f32, rounded to x's dtype. An implementation may round a, v, act and the normalized act
// to x's dtype (upstream's chain of ops does); the error model allows for it.
#pragma once

#include <cstdint>
#include <string_view>

#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// The parsed, validated view of triangle_multiplication's BoundArgs.
struct TriangleMultiplicationProblem {
  static constexpr std::string_view kOp = "triangle_multiplication";
  static constexpr std::string_view kSummary =
      "AlphaFold's triangle multiplicative update: layer norm, sigmoid-gated projections under "
      "the mask, the H-batched N x N x N product, layer norm, gated output projection";
  int64_t N = 0, C = 0, H = 0, D = 0;
  DType x_dtype = DType::kF32;  // and the output's
  bool outgoing = true;         // triangle_type
  double epsilon = 1e-6;

  int64_t positions() const { return N * N; }
  static TriangleMultiplicationProblem from(const BoundArgs& args);
};

using TriangleMultiplicationOp = ProblemOp<TriangleMultiplicationProblem>;

// The names of the ten weights and norms, in upstream's argument order after x and mask.
inline constexpr const char* kTriangleWeights[] = {
    "projection_in_weights", "gate_in_weights",     "projection_out_weights",
    "gate_out_weights",      "layernorm_in_scale",  "layernorm_in_offset",
    "layernorm_out_scale",   "layernorm_out_offset"};

// The portable reference: upstream's steps as plain f32 loops, every intermediate in f32.
void triangle_multiplication_reference(const TriangleMultiplicationProblem& problem,
                                       const TensorMap& inputs,  // x, mask and the weights
                                       // Outputs.
                                       Tensor& out);  // [N, N, D]

}  // namespace tokamax
