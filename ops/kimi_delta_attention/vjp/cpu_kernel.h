// kimi_delta_attention_vjp on CPU: the "cpu" implementation's config and kernel: per (head, batch
// row) task, the forward once with its states checkpointed every `block` tokens, then the blocks
// backward, each recomputing its tokens' states from its checkpoint (memory O(T / block K V) per
// task, not O(T K V)) and running each token's backward as two vectorized passes over the state
// and its adjoint (cpu_rows.cc).
//
// Dimensions: as ../base.h.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

#include "ops/framework/tensor.h"
#include "ops/kimi_delta_attention/vjp/base.h"

namespace tokamax {

// The longest block: its per-token states (block K V floats) should stay in L2.
inline constexpr int kMaxKdaVjpBlock = 256;

struct CpuKdaVjpConfig {
  int num_threads = 0;  // 0 = all cores
  int block = 16;       // tokens per checkpoint
  // A block of one slot's tokens whose gates the chunked form can take runs as one chunk on
  // the GEMM engine (kda_vjp_chunk); otherwise, and when false, token by token.
  bool chunked = false;

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("num_threads", num_threads);
    v("block", block);
    v("chunked", chunked);
  }
  auto key() const { return std::make_tuple(num_threads, block, chunked); }
};

void kimi_delta_attention_vjp_cpu_kernel(const KdaVjpProblem& p, const CpuKdaVjpConfig& c,
                                         const TensorMap& inputs,
                                         // Outputs.
                                         TensorMap& outputs);

// One chunk of n tokens on one slot, for its backward in the WY form (cpu_chunk.cc).
struct KdaVjpChunk {
  int64_t n = 0, K = 0, V = 0;
  // Inputs.
  const float* q = nullptr;     // [n, K] q^ (normalized, scaled)
  const float* k = nullptr;     // [n, K] k^
  const float* v = nullptr;     // [n, V]
  const float* g = nullptr;     // [n, K] log decays (kda_chunkable)
  const float* beta = nullptr;  // [n]
  const float* S0 = nullptr;    // [K, V] the state before the chunk
  const float* dout = nullptr;  // [n, V]
  // The forward's residuals: written by kda_chunk_advance, read by kda_vjp_chunk.
  float* U = nullptr;   // [n, V] (I + A) U = diag(beta) (v - k exp(b) S_0), A = diag(beta) A'
  float* Ap = nullptr;  // [n, n] A'[t, s] = k_t . k_s exp(b_t - b_s) for s < t, zero above
                        // (b the cumulative log decays)
};

// The chunk's forward, its state only: S <- S_n, and c.U, c.Ap (c.q, c.S0 and c.dout unused):
// the checkpointing forward's step for a block the chunked form can take.
void kda_chunk_advance(const KdaVjpChunk& c,
                       // Inputs and outputs.
                       float* S);

// The chunk's gradients from G = dS_n, the adjoint of the state after it (replaced by dS_0),
// and its residuals from kda_chunk_advance: dq^, dk^ [n, K], dv [n, V], dbeta [n], and dg [n,
// K] with respect to the log decays.
void kda_vjp_chunk(const KdaVjpChunk& c,
                   // Inputs and outputs.
                   float* G,
                   // Outputs.
                   float* dq, float* dk, float* dv, float* dbeta, float* dg);

// One token's forward quantities that its backward reads.
struct KdaVjpToken {
  const float* q = nullptr;     // [K] q^ (normalized, scaled)
  const float* k = nullptr;     // [K] k^
  const float* d = nullptr;     // [K] exp(g)
  const float* r = nullptr;     // [V] v - S'^T k^
  const float* dout = nullptr;  // [V]
  float beta = 0.0f;
};

// With Sd = S' = diag(d) S_{t-1} (the decayed state), S_t = S' + beta k^ r^T and G the slot's
// adjoint [K, V]:
// pass 1: dq^ = S_t dout; G += q^ dout^T; acc_dr = G^T k^; xr = G r.
void kda_vjp_pass1(const KdaVjpToken& x, const float* Sd, float* G, int64_t K, int64_t V,
                   // Outputs.
                   float* dq, float* acc_dr, float* xr);  // [K], [V], [K]
// pass 2 (dr = beta acc_dr): dk^ -= S' dr; G' = G - k^ dr^T; dg = rows of G' . S'; G = diag(d) G'.
void kda_vjp_pass2(const KdaVjpToken& x, const float* Sd, float* G, const float* dr, int64_t K,
                   int64_t V,
                   // Outputs.
                   float* dk, float* dg);  // [K] each

// pass 2 of token t, then pass 1 of the token before it on the same slot (`prev`, its decayed
// state Sd_prev), in one sweep over the rows.
void kda_vjp_pass2_pass1(const KdaVjpToken& x, const float* Sd, float* G, const float* dr,
                         const KdaVjpToken& prev, const float* Sd_prev, int64_t K, int64_t V,
                         // Outputs.
                         float* dk, float* dg,                                 // [K] each
                         float* dq_prev, float* acc_dr_prev, float* xr_prev);  // [K], [V], [K]

// Through the gate's activation: dgate = dg dg/dgate, ddtb += dgate; returns sum dg dg/da_log.
// `log_decay`: the row's log decays where the caller has them (or null), which are dg/da_log
// of the softplus form (-A softplus(x), A = exp(a_log)), so that its softplus is not recomputed.
// dgate may be dg (in place).
float kda_vjp_gate_row(const KdaProblem& p, float a_log,
                       // Inputs.
                       const float* gate, const float* bias, const float* log_decay,
                       const float* dg, int64_t K,
                       // Outputs.
                       float* dgate, float* ddtb);  // [K] each

}  // namespace tokamax
