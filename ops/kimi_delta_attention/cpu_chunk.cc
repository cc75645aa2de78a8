// kimi_delta_attention on CPU: runs of tokens in chunks (cpu_kernel.h: kda_chunked_run). With a
// decay per key channel, A'[t, s] = sum_i k_t,i k_s,i exp(b_t,i - b_s,i) is no plain product. It
// factors through a reference token r: exp(b_t - b_r) exp(b_r - b_s). Rows t of sub-chunk J
// take r = J's first token, so every factor of a column s before J is <= 1 and those of J's own
// columns are at most e^80 (the run checks it per chunk), and each sub-chunk's rows of A and P
// are one GEMM: [k exp(b - b_r); q exp(b - b_r)] (x) [k exp(b_r - b)]^T.
//
// Dimensions: as base.h; n the tokens of the current chunk, m of the current sub-chunk.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/delta_rule_chunk.h"
#include "ops/kimi_delta_attention/cpu_kernel.h"

namespace tokamax {
namespace {

// The smallest decay a sub-chunk's factors may span: e^80 and e^-80 stay normal f32 numbers.
constexpr float kMinSubChunkLogDecay = -80.0f;

}  // namespace

bool kda_chunkable(const float* g, int64_t n, int64_t K) {
  thread_local std::vector<float> sums;
  sums.resize(static_cast<size_t>(K));
  float* sum = sums.data();
  for (int64_t t = 0; t < n; ++t) {
    // A sub-chunk's factors reach exp(b_r - b_s) for s after its first token r: the sums of g
    // over (r, s]. Branch-free over the row, so that it vectorizes.
    const float* gt = g + t * K;
    int bad = 0;
    if (t % kKdaSubChunk == 0) {
      std::fill_n(sum, K, 0.0f);
    } else {
#pragma GCC ivdep
      for (int64_t i = 0; i < K; ++i) sum[i] += gt[i];
    }
#pragma GCC ivdep
    for (int64_t i = 0; i < K; ++i) bad |= (gt[i] > 0.0f) | (sum[i] < kMinSubChunkLogDecay);
    if (bad) return false;
  }
  return true;
}

void kda_chunked_run(const KdaTaskRows& x, int64_t chunk, int64_t t0, int64_t t1, float* S) {
  const int64_t K = x.p.K, V = x.p.V, c = chunk, sub = kKdaSubChunk;
  // q, k, b (the cumulative log decays) [c, K]; v [c, V]; beta [c]; L [2 sub, K]; R [c, K]; AP
  // [2 sub, c]; A, P [c, c]; kq [2c, K]; kd [c, K]; sd and zeros [K]; uo [2c, V].
  thread_local std::vector<float> scratch;
  const int64_t need = 3 * c * K + c * V + c + 2 * sub * K + c * K + 2 * sub * c + 2 * c * c +
                       3 * c * K + 2 * K + 2 * c * V;
  if (static_cast<int64_t>(scratch.size()) < need) scratch.resize(static_cast<size_t>(need));
  float* q = scratch.data();
  float* k = q + c * K;
  float* b = k + c * K;
  float* v = b + c * K;
  float* beta = v + c * V;
  float* L = beta + c;
  float* R = L + 2 * sub * K;
  float* AP = R + c * K;
  float* A = AP + 2 * sub * c;
  float* P = A + c * c;
  float* kq = P + c * c;
  float* kd = kq + 2 * c * K;
  float* sd = kd + c * K;
  float* zeros = sd + K;
  float* uo = zeros + K;
  std::fill_n(zeros, K, 0.0f);
  const int64_t out_size = static_cast<int64_t>(dtype_size(x.out.dtype()));
  for (int64_t j0 = t0; j0 < t1; j0 += c) {
    const int64_t n = std::min(c, t1 - j0);
    for (int64_t t = 0; t < n; ++t) {
      beta[t] = kda_load_token(x, j0 + t, /*log=*/true, q + t * K, k + t * K, v + t * V, b + t * K);
    }
    if (!kda_chunkable(b, n, K)) {
      kda_token_run(x, j0, j0 + n, S);
      continue;
    }
    for (int64_t t = 1; t < n; ++t) {  // the cumulative log decays
      for (int64_t i = 0; i < K; ++i) b[t * K + i] += b[(t - 1) * K + i];
    }
    std::fill_n(A, n * n, 0.0f);
    std::fill_n(P, n * n, 0.0f);
    for (int64_t s0 = 0; s0 < n; s0 += sub) {
      const int64_t m = std::min(sub, n - s0), cols = s0 + m;
      const float* br = b + s0 * K;
      for (int64_t t = s0; t < s0 + m; ++t) {
        delta_rule_scale_exp(k + t * K, br, b + t * K, 1.0f, false, L + (t - s0) * K, K);
        delta_rule_scale_exp(q + t * K, br, b + t * K, 1.0f, false, L + (m + t - s0) * K, K);
      }
      for (int64_t s = 0; s < cols; ++s) {
        // Before the sub-chunk exp(b_r - b_s) <= 1; within it 1 / exp(b_s - b_r) <= e^80.
        delta_rule_scale_exp(k + s * K, b + s * K, br, 1.0f, /*reciprocal=*/s >= s0, R + s * K, K);
      }
      GemmOperand r_t{DType::kF32, R, K};
      r_t.transposed = true;
      cpu_gemm_f32({DType::kF32, L, K}, r_t, 2 * m, cols, K, AP, cols, /*accumulate=*/false);
      for (int64_t t = s0; t < s0 + m; ++t) {
        const float* a_row = AP + (t - s0) * cols;
        const float* p_row = AP + (m + t - s0) * cols;
        for (int64_t s = 0; s < t; ++s) A[t * n + s] = beta[t] * a_row[s];
        for (int64_t s = 0; s <= t; ++s) P[t * n + s] = p_row[s];
      }
    }
    const float* b_last = b + (n - 1) * K;
    for (int64_t t = 0; t < n; ++t) {
      const float* bt = b + t * K;
      delta_rule_scale_exp(k + t * K, zeros, bt, -beta[t], false, kq + t * K, K);
      delta_rule_scale_exp(q + t * K, zeros, bt, 1.0f, false, kq + (n + t) * K, K);
      delta_rule_scale_exp(k + t * K, bt, b_last, 1.0f, false, kd + t * K, K);
      delta_rule_scale(v + t * V, beta[t], uo + t * V, V);
    }
    std::fill_n(uo + n * V, n * V, 0.0f);
    std::fill_n(sd, K, 1.0f);
    delta_rule_scale_exp(sd, zeros, b_last, 1.0f, false, sd, K);
    delta_rule_chunk(
        {.n = n, .K = K, .V = V, .A = A, .P = P, .kq = kq, .kd = kd, .sd = sd, .uo = uo}, S);
    char* out_rows = static_cast<char*>(x.out.raw()) + x.row(j0) * V * out_size;
    store_rows(uo + n * V, V, n, V, x.out.dtype(), out_rows, V);
  }
}

}  // namespace tokamax
