// dot_product_attention_vjp: the high-level entry point, tokamax::dot_product_attention_vjp(q, k,
// v, dout, options): the gradients of dot_product_attention's inputs.
//
// Dimensions.
//   *B     batch dimensions
//   T, t   query and key/value positions
//   H, h   query and key/value heads (H a multiple of h)
//   D, d   q/k and v head dimensions
#pragma once

#include <optional>

#include "ops/dot_product_attention/api.h"
#include "ops/dot_product_attention/vjp/base.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const DotProductAttentionVjpOp& dot_product_attention_vjp_op();

struct AttentionGradients {
  Tensor dq;                    // q's spec
  Tensor dk;                    // k's spec
  Tensor dv;                    // v's spec
  std::optional<Tensor> dbias;  // bias's spec, when the options give a bias
};

// The gradients of dot_product_attention(q, k, v, options) for the cotangent dout of its output.
// `lse` [*B, H, T] f32, the forward's per-row log-sum-exp, and `out`, the forward's output, are
// used for the row statistics instead of computing them.
// `options` are the forward's (implementation and config pick the VJP's). Throws
// InvalidArgument naming the argument when shapes or dtypes disagree.
AttentionGradients dot_product_attention_vjp(const Tensor& q,     // [*B, T, H, D]
                                             const Tensor& k,     // [*B, t, h, D]
                                             const Tensor& v,     // [*B, t, h, d]
                                             const Tensor& dout,  // [*B, T, H, d] q's dtype
                                             const DotProductAttentionOptions& options = {},
                                             const Tensor* lse = nullptr,
                                             const Tensor* out = nullptr);

}  // namespace tokamax
