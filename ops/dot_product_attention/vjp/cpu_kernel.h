// dot_product_attention_vjp on CPU: the flash-style backward kernel (per block of query rows,
// [bq, t] strips of S and dP, never a [T, t] matrix).
//
// Dimensions.
//   B      flattened batch;  T, t  query and key/value positions
//   H, h   query and key/value heads, g = H / h
//   D, d   q/k and v head dimensions
//   bq, bkv  query rows and keys of one block
#pragma once

#include "ops/dot_product_attention/vjp/base.h"
#include "ops/dot_product_attention/vjp/cpu_config.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// Computes every gradient on the thread pool. Scratch: per thread [bq, t] strips of S and dP
// (and the cap's gate), one f32 copy of dk and dv (and of dbias with a bias). Throws
// NotImplemented for f64.
// The packed k^T, v^T and k of one wave of kv heads stay under this (one head at least).
inline constexpr int64_t kAttentionVjpWaveBytes = int64_t{64} << 20;

void dot_product_attention_vjp_cpu_kernel(const AttentionProblem& p,
                                          const CpuAttentionVjpConfig& config,
                                          // Inputs.
                                          const Tensor& q,     // [*B, T, H, D]
                                          const Tensor& k,     // [*B, t, h, D]
                                          const Tensor& v,     // [*B, t, h, d]
                                          const Tensor* bias,  // broadcast to [*B, H, T, t]
                                          const Tensor* mask,  // bool, broadcast likewise
                                          const Tensor& dout,  // [*B, T, H, d] q's dtype
                                          const Tensor* lse,   // [*B, H, T] f32, or null
                                          const Tensor* out,   // [*B, T, H, d] q's dtype, or null
                                          // Outputs.
                                          Tensor& dq,     // q's spec
                                          Tensor& dk,     // k's spec
                                          Tensor& dv,     // v's spec
                                          Tensor* dbias,  // bias's spec, or null
                                          int64_t wave_bytes = kAttentionVjpWaveBytes);

}  // namespace tokamax
