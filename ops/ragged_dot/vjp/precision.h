// ragged_dot_vjp under a rounding `precision` preset (ops/common/precision.h), as upstream's VJP
// passes the forward's precision to both of its products.
//
// Dimensions: as base.h (G, M, K, N); P the preset's products per term.
//
// Both gradients are bilinear: dlhs = dout rhs^T in (dout, rhs), drhs = lhs^T dout in (lhs,
// dout). The preset's sum over piece pairs (i, j) of each product is therefore the sum of P
// plain gradients on pieces: pass (i, j) takes dout's piece i and lhs's and rhs's piece j,
// giving dlhs's pair (i, j) and drhs's pair (j, i), and every preset's pair set is symmetric.
// (Expanding the operands along the contraction, as the forward does, would need dout split
// along N for one product and along the ragged rows for the other.) Each pass writes f32
// gradients; they are summed in f32 and rounded once to the gradients' dtypes.
#pragma once

#include <functional>

#include "ops/common/precision.h"
#include "ops/framework/tensor.h"
#include "ops/ragged_dot/vjp/base.h"

namespace tokamax {

// Whether the preset changes lhs, rhs or dout (otherwise the gradient runs on them as given).
bool vjp_precision_rounds(const RaggedDotVjpProblem& p);

// The pieces' plan: every operand split as an f32 one (a 16-bit operand's pieces past the first
// are zero), so one pair set serves all three.
PrecisionPlan vjp_precision_plan(const RaggedDotVjpProblem& p);

// The problem each pass runs: the pieces' dtype for lhs, rhs and dout, no preset, f32
// gradients; `p` itself when the preset rounds nothing. Implementations check and choose configs
// for it.
RaggedDotVjpProblem vjp_computed(const RaggedDotVjpProblem& p);

// Runs the gradient of `p`: `run` once on the inputs as given, or once per pass on pieces
// (with vjp_computed(p) and f32 outputs), summed into `outputs`.
using RaggedDotVjpRun =
    std::function<void(const RaggedDotVjpProblem&, const TensorMap& inputs, TensorMap& outputs)>;
void run_ragged_dot_vjp(const RaggedDotVjpProblem& p, const TensorMap& inputs, TensorMap& outputs,
                        const RaggedDotVjpRun& run);

}  // namespace tokamax
