// gated_delta_rule on CPU: the "cpu" implementation's config and kernel: the shared conv, then
// one task per (request, value head) running the recurrence in chunks of tokens on the GEMM
// engine (ops/common/delta_rule_chunk.h), or token by token with the state's passes vectorized
// (ops/common/delta_rule_rows.h).
//
// Dimensions: as base.h.
#pragma once

#include <string>
#include <tuple>

#include "ops/framework/tensor.h"
#include "ops/gated_delta_rule/base.h"

namespace tokamax {

// The longest chunk: its [chunk, d_k + d_v] solve should stay in L2.
inline constexpr int kMaxGdnChunk = 256;

struct CpuGdnConfig {
  int num_threads = 0;  // 0 = all cores
  // Tokens per chunk of a request of more than one token (0: token by token). A decode token
  // always runs token by token (a chunk of one is the same arithmetic with more steps).
  int chunk = 32;

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("num_threads", num_threads);
    v("chunk", chunk);
  }
  auto key() const { return std::make_tuple(num_threads, chunk); }
};

// What the tasks read, prepared once per call: the conv's output, head-major (base.h's
// GdnHeadMajor), with q and k of every valid token normalized in place (q scaled), and per
// (token, value head) its log decay g and beta.
struct GdnTokens {
  const float* mixed = nullptr;      // T C
  const float* log_decay = nullptr;  // [valid tokens, n_v]
  const float* beta = nullptr;       // [valid tokens, n_v]
};

// The chunked form of request r's recurrence for value head h: chunks of `chunk` tokens (the
// last one shorter), each through delta_rule_chunk with k k^T and q k^T on the GEMM engine.
// S [d_k, d_v] f32 holds the state before and after; out rows go to `out` (the op's output).
void gdn_chunked_task(const GdnProblem& p, const GdnTokens& x, int64_t chunk, int64_t r, int64_t h,
                      // Outputs.
                      float* S, Tensor& out);

// The conv and silu of every token (gdn_conv_silu, parallel over requests), then per (request,
// value head) its state in f32 scratch (the slot's, or zeros without an initial state), in
// chunks (c.chunk > 0 and more than one token: gdn_chunked_task), or token by token: S = exp(g)
// S with pred = k^T S, then S += (beta k) r^T with out = q^T S, the next token's decay and
// prediction riding on this token's pass (one read and write of the state per token); the state
// stored back in its dtype once, after the request's last token. A decode (one token from the
// slot) reads the stored state twice instead (the second time from cache) and keeps no f32
// copy; its task runs several heads, each prefetching the next one's state.
void gated_delta_rule_cpu_kernel(const GdnProblem& p, const CpuGdnConfig& c,
                                 const TensorMap& inputs,
                                 // Outputs.
                                 TensorMap& outputs);

}  // namespace tokamax
