// splash_attention_vjp: the high-level C++ API, the gradients of splash_attention's inputs.
//
// Dimensions: as base.h.
#pragma once

#include "ops/framework/tensor.h"
#include "ops/splash_attention/api.h"
#include "ops/splash_attention/vjp/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const SplashAttentionVjpOp& splash_attention_vjp_op();

// "dq", "dk", "dv" in their inputs' specs, and "dsinks" with sinks, for the cotangent dout of
// splash_attention(q, k, v, options)'s out. options.tensors may also hold upstream's residual
// "logsumexp" f32 [Hq, T] and the forward's "out"; options.args are the forward's
// (return_residuals must stay false, as upstream). Throws InvalidArgument naming the argument.
TensorMap splash_attention_vjp(const Tensor& q,     // [Hq, T, D]
                               const Tensor& k,     // [Hkv, t, D] ([t, D] with is_mqa)
                               const Tensor& v,     // [Hkv, t, d]
                               const Tensor& dout,  // [Hq, T, d] q's dtype
                               const SplashAttentionOptions& options);

}  // namespace tokamax
