// Vectorized activations on f32 rows (Highway, dispatched at run time), with exactly the
// definitions of ops/common/activation.h, and the gated-linear-unit combine act(gate) * proj.
//
// Dimensions.
//   n      elements of one row
//
// Accuracy (f32): every activation is within a few f32 ulps of apply_activation<double> measured
// on |act| + |x| (the absolute error of forms like 0.5 x (1 + erf(x / sqrt 2)), whose 1 + erf
// cancels for negative x, scales with |x|); tests/ops/common/cpu_activation_test.cc checks it.
#pragma once

#include <cstdint>

#include "ops/common/activation.h"

namespace tokamax {

// x[i] = act(x[i]) in place.
void cpu_activation_row(Activation activation, float* x, int64_t n);

// out[i] = act(gate[i]) * proj[i]. `out` may be `gate` or `proj` (same index in place).
void cpu_glu_row(Activation activation,
                 // Inputs.
                 const float* gate,  // [n]
                 const float* proj,  // [n]
                 // Outputs.
                 float* out,  // [n]
                 int64_t n);

// out[i] = act(gate[i] + gate_bias[i]) * (proj[i] + proj_bias[i]) in one pass (ragged_dot's
// fused epilogue). A null bias adds nothing; a null proj gives act(gate[i] + gate_bias[i]).
// form: a clamped or situ combine instead (activation.h's clamped_glu / situ_glu of gate +
// gate_bias and proj + proj_bias; the activation is then ignored). `out` may be `gate` or `proj`.
void cpu_biased_glu_row(Activation activation, GluForm form,
                        // Inputs.
                        const float* gate,       // [n]
                        const float* gate_bias,  // [n] or null
                        const float* proj,       // [n] or null
                        const float* proj_bias,  // [n] or null
                        // Outputs.
                        float* out,  // [n]
                        int64_t n);

// In place over one row segment of the recomputed gate g and projection p (gated_linear_unit_vjp):
// gate[i] <- dout[i] p[i] act'(g[i]), proj[i] <- dout[i] act(g[i]).
void cpu_glu_vjp_row(Activation activation, const float* dout, float* gate, float* proj, int64_t n);

}  // namespace tokamax
