// kimi_delta_attention_vjp on CPU: the rows of one chunk that its forward step and its backward
// both compute from the chunk's inputs (cpu_chunk.cc), and the sub-chunks' pairwise products.
//
// Dimensions: as ../base.h; n the chunk's tokens, `sub` = kKdaSubChunk, J a sub-chunk and r its
// first token, m its tokens.
#pragma once

#include <cstdint>

#include "ops/kimi_delta_attention/cpu_kernel.h"
#include "ops/kimi_delta_attention/vjp/cpu_kernel.h"

namespace tokamax {

// Views into one per-thread buffer (valid until the thread's next kda_vjp_chunk_rows): with b
// the cumulative log decays,
struct KdaVjpChunkRows {
  int64_t n = 0, K = 0;
  float* b = nullptr;   // [n, K]
  float* Kd = nullptr;  // [n, K] k exp(b)
  float* Kr = nullptr;  // [n, K] k exp(b_{n-1} - b)
  float* Qd = nullptr;  // [n, K] q exp(b) (backward only)
  float* E = nullptr;   // [n, K] exp(b_t - b_r) of t's sub-chunk
  // [sub-chunks, K] exp(b_r), from which exp(b_t) = exp(b_r) E_t and exp(b_{n-1} - b_t) =
  // E_{n-1} F_t, F the last sub-chunk's (both factors at most 1 for t before it; within it F_t
  // = 1 / E_t, whose range kda_chunkable bounds), cost a multiply each where they are read:
  // they are not stored, as the chunk's elementwise passes are bound by their stores.
  float* e_r = nullptr;
  float* sd = nullptr;  // [K] exp(b_{n-1})
  // Per sub-chunk: L = [k_t; q_t] exp(b_t - b_r) for t in J [2 sub, K] (the q rows backward
  // only); R_s = k_s exp(b_r - b_s) and F_s = exp(b_r - b_s) for s up to J's last [n, K] each.
  float* L_all = nullptr;
  float* R_all = nullptr;
  float* F_all = nullptr;
  float* extra = nullptr;  // the caller's floats

  int64_t rows_of(int64_t s0) const { return s0 + kKdaSubChunk <= n ? kKdaSubChunk : n - s0; }
  float* L(int64_t s0) const { return L_all + s0 / kKdaSubChunk * 2 * kKdaSubChunk * K; }
  float* R(int64_t s0) const { return R_all + s0 / kKdaSubChunk * n * K; }
  float* F(int64_t s0) const { return F_all + s0 / kKdaSubChunk * n * K; }
  // Token t's exp(b_r) row; E's last row and the last sub-chunk's F (exp(b_{n-1} - b_t) =
  // E_last[i] F_last[t K + i]).
  const float* e_r_of(int64_t t) const { return e_r + t / kKdaSubChunk * K; }
  const float* E_last() const { return E + (n - 1) * K; }
  const float* F_last() const { return F((n - 1) / kKdaSubChunk * kKdaSubChunk); }
};

// The rows of chunk c (its q too with `backward`), and `extra` more floats of scratch.
KdaVjpChunkRows kda_vjp_chunk_rows(const KdaVjpChunk& c, bool backward, int64_t extra);

// X [n, n] = the k rows (A') or the q rows (P, with its diagonal) of each sub-chunk's L times
// its R^T: X[t, s] for s < t (s <= t with `diagonal`), zero above; GR [sub, n] scratch.
void kda_vjp_chunk_products(const KdaVjpChunkRows& x, bool q_rows, bool diagonal,
                            // Outputs.
                            float* X,
                            // Scratch.
                            float* GR);

}  // namespace tokamax
