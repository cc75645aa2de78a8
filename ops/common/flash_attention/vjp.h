// The flash-attention core, backward (every attention op's CPU VJP): the flash-style backward
// kernel (per block of query rows, [bq, t] strips of S and dP, never a [T, t] matrix).
//
// Dimensions.
//   B      flattened batch;  T, t  query and key/value positions
//   H, h   query and key/value heads, g = H / h
//   D, d   q/k and v head dimensions
//   bq, bkv  query rows and keys of one block
#pragma once

#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/flash_attention/problem.h"
#include "ops/framework/tensor.h"

namespace tokamax {

struct FlashVjpOptions {
  int block_q = 128;   // bq: query rows of one task (per q head)
  int block_kv = 128;  // bkv: keys of one block
  // The engine of the two products of inputs (S = q k^T, dP = dout v^T); with round_p also of
  // dv, dk and dq, with P and dS rounded to bf16 for them.
  GemmEngine engine = GemmEngine::kF32Fma;
  bool round_p = false;
  int num_threads = 0;  // 0 = all cores
};

// Per-row statistics a caller may want back, f32 [B, H, T] each (null: not wanted): lse (the
// given one, or log sum_j exp(s_j) with the sink's term, computed) and Dr = rowsum(dout * out)
// (dout . out when out is given, else rowsum(P dP)). Rows that see no key: lse = the sink (-inf
// without one), Dr as computed.
struct FlashVjpRowStats {
  float* lse = nullptr;
  float* delta = nullptr;
};

// Computes every gradient on the thread pool. The gradients are stored in their tensors'
// dtypes (any float dtype; the shapes of q, k, v and bias). Scratch: per thread [bq, t] strips of S
// and dP (and the cap's gate), one f32 copy of dk and dv (and of dbias with a bias). Throws
// NotImplemented for f64.
// The packed k^T, v^T and k of one wave of kv heads stay under this (one head at least).
inline constexpr int64_t kAttentionVjpWaveBytes = int64_t{64} << 20;

void flash_attention_vjp_cpu(const FlashAttentionProblem& p, const FlashVjpOptions& options,
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
                             const FlashVjpRowStats& row_stats = {},
                             int64_t wave_bytes = kAttentionVjpWaveBytes);

}  // namespace tokamax
