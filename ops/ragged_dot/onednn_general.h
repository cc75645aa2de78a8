// ragged_dot's oneDNN baseline for the other dimension numbers (trans_rhs, ragged_contracting):
// one cached oneDNN matmul per non-empty group, the transposed operand given to oneDNN as a
// strided memory descriptor (no copy), as a oneDNN user would write ragged_dot_general.
//
// Dimensions: as base.h; m_g, k_g the rows of group g (of M, or of K for ragged_contracting).
#pragma once

#include "ops/framework/tensor.h"
#include "ops/ragged_dot/base.h"

namespace tokamax {

// f32 -> f32 and bf16 -> f32 / bf16 (as the default form's baseline checks); every output
// element written.
void run_onednn_general(const RaggedDotProblem& p, const TensorMap& inputs, TensorMap& outputs);

}  // namespace tokamax
