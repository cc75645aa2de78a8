// kimi_delta_attention_vjp: the high-level C++ API, the gradients of kimi_delta_attention's
// inputs.
//
// Dimensions: as base.h.
#pragma once

#include "ops/framework/tensor.h"
#include "ops/kimi_delta_attention/api.h"
#include "ops/kimi_delta_attention/vjp/base.h"

namespace tokamax {

// The op object: bind, counts, oracle, and its implementations in dispatch order.
const KdaVjpOp& kimi_delta_attention_vjp_op();

// "dquery", "dkey", "dvalue", "dgate", "dbeta" in their inputs' specs, and "da_log",
// "ddelta_time_bias", "dinitial_state" for those inputs when given, for the cotangent dout of
// kimi_delta_attention(query, key, value, gate, beta, options)'s out. With output_final_state,
// options.tensors may hold "dfinal_state" f32 [B, N, H, K, V] (zeros when absent). Throws
// InvalidArgument naming the argument.
TensorMap kimi_delta_attention_vjp(const Tensor& query,  // [H, B, T, K]
                                   const Tensor& key,    // [H, B, T, K]
                                   const Tensor& value,  // [H, B, T, V]
                                   const Tensor& gate,   // [H, B, T, K]
                                   const Tensor& beta,   // [H, B, T]
                                   const Tensor& dout,   // [H, B, T, V] query's dtype
                                   const KdaOptions& options = {});

}  // namespace tokamax
