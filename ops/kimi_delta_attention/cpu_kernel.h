// kimi_delta_attention on CPU: the "cpu" implementation's config and kernel, one task per (head,
// batch row), each run of tokens on one state slot in chunks on the GEMM engine (ops/common/
// delta_rule_chunk.h; cpu_chunk.cc) or token by token with the state's passes vectorized.
//
// Dimensions: as base.h.
#pragma once

#include <string>
#include <tuple>

#include "ops/framework/tensor.h"
#include "ops/kimi_delta_attention/base.h"

namespace tokamax {

// The longest chunk: its [chunk, K + V] rows should stay in L2.
inline constexpr int kMaxKdaChunk = 256;
// Tokens per sub-chunk, whose decay products factor through its first token (cpu_chunk.cc).
inline constexpr int64_t kKdaSubChunk = 16;

struct CpuKdaConfig {
  int num_threads = 0;  // 0 = all cores
  // Tokens per chunk of a run of more than one token on one slot (0: token by token).
  int chunk = 32;

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("num_threads", num_threads);
    v("chunk", chunk);
  }
  auto key() const { return std::make_tuple(num_threads, chunk); }
};

// Per (head, batch row) task: each run of consecutive tokens on one slot advances that slot's
// state (in final_state when it is an output, f32 [B, N, H, K, V], else in the task's scratch)
// in chunks (c.chunk > 0 and more than one token: kda_chunked_run) or token by token
// (kda_token_run); padding tokens output zeros.
void kimi_delta_attention_cpu_kernel(const KdaProblem& p, const CpuKdaConfig& c,
                                     const TensorMap& inputs,
                                     // Outputs.
                                     TensorMap& outputs);

// One (head h, batch row b) task's inputs and output, and where token t's rows are.
struct KdaTaskRows {
  const KdaProblem& p;
  // The token inputs, looked up once per task (not by name per token).
  const Tensor &query, &key, &value, &gate, &beta;
  int64_t h = 0, b = 0;
  float a_log = 0.0f;
  const float* bias = nullptr;  // [K] the head's delta_time_bias (zeros without it)
  Tensor& out;
  int64_t row(int64_t t) const { return (h * p.B + b) * p.T + t; }
};

// Row `row` of a tensor (f32, bf16 or f16) of rows of n elements, as f32 (vectorized).
void kda_load_row(const Tensor& x, int64_t row, int64_t n,
                  // Outputs.
                  float* out);

// Token t's rows as f32: q and k (l2-normalized under use_qk_l2norm, q scaled), v, and the
// decays exp(g) per key channel, or the log decays g themselves (`log`); returns beta.
float kda_load_token(const KdaTaskRows& x, int64_t t, bool log,
                     // Outputs.
                     float* q, float* k, float* v, float* decay);  // [K], [K], [V], [K]

// Tokens [t0, t1) of one slot on its state S [K, V], token by token: S = diag(exp g) S with
// pred = k^T S, then S += (beta k) r^T with out = q^T S, the next token's decay and prediction
// riding on this token's pass (one pass over the state per token). With `src`, the state before
// t0 is read from there (in src_dtype) by the first pass instead of from S; with `dst`, the
// state after t1 - 1 is written there (f32) by the last pass instead of into S; with both and
// one token, S is not used.
void kda_token_run(const KdaTaskRows& x, int64_t t0, int64_t t1,
                   // Outputs.
                   float* S,
                   // Inputs.
                   DType src_dtype = DType::kF32, const void* src = nullptr,
                   // Outputs.
                   float* dst = nullptr);

// The same in chunks of `chunk` tokens through delta_rule_chunk. A chunk runs token by token
// instead where the chunked form's factors could overflow: a gate that grows the state (g > 0)
// or a sub-chunk of kKdaSubChunk tokens decaying some channel by more than e^-80.
void kda_chunked_run(const KdaTaskRows& x, int64_t chunk, int64_t t0, int64_t t1,
                     // Outputs.
                     float* S);

// Whether a chunk's log decays g [n, K] (row stride K) suit the chunked form: none grows the
// state (g > 0), and no channel decays by more than e^-80 after a sub-chunk's first token
// within the sub-chunk, so its factors stay normal f32 numbers.
bool kda_chunkable(const float* g, int64_t n, int64_t K);

// The decays exp(g) of a token's K gate values, g as kda_log_decay (with head h's a_log); or g
// itself (kda_log_decay_row).
void kda_decay_row(const KdaProblem& p, float a_log,
                   // Inputs.
                   const float* gate,  // [K]
                   const float* bias,  // [K] the head's delta_time_bias (zeros without it)
                   int64_t K,
                   // Outputs.
                   float* decay);  // [K]
void kda_log_decay_row(const KdaProblem& p, float a_log, const float* gate, const float* bias,
                       int64_t K,
                       // Outputs.
                       float* g);  // [K]

}  // namespace tokamax
