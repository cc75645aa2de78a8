// ragged_dot: the f32 epilogue of a row's partial sums on the CPU (bias, then the activation or
// act(gate) * up), shared by the cpu kernel (fused, per task) and the oneDNN composite (a second
// pass after the matmul), so that the two differ only in the fusion.
//
// Dimensions.
//   N      columns of rhs ([gate | up] with a fused gate/up: out_N = N / 2 each)
//   cols   columns of this row piece, from output column col0
#pragma once

#include <cstdint>
#include <vector>

#include "ops/framework/tensor.h"
#include "ops/ragged_dot/base.h"

namespace tokamax {

// The problem's epilogue with the bias once in f32.
struct RaggedDotEpilogue {
  int64_t N = 0, out_N = 0;
  std::vector<float> bias;  // [G, N], empty: none
  Activation activation = Activation::kNone;
  GateUp gate_up = GateUp::kNone;
  SituGlu situ;

  // `bias` is rhs_bias [G, N] when the problem has one (else null).
  RaggedDotEpilogue(const RaggedDotProblem& problem, const Tensor* bias);

  // In place in gate[0, cols): + bias[group, col0 ...], then act(gate), or act(gate) * up with
  // up[0, cols) the up half's partial sums (+ bias[group, out_N + col0 ...]).
  void row(int64_t group, int64_t col0, int64_t cols, float* gate, float* up) const;
};

}  // namespace tokamax
