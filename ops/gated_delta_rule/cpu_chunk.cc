// gated_delta_rule on CPU: the chunked form of one (request, value head) task (cpu_kernel.h). With
// one decay per head, the chunk's decayed products are k k^T and q k^T from the GEMM engine
// scaled elementwise by exp(b_t - b_s) (ops/common/delta_rule_chunk.h says what they are), and
// the products with S_0 take the unscaled [k; q], each row scaled after: one packing of [k; q]
// serves all four.
//
// Dimensions: as base.h; n the tokens of the current chunk (<= chunk).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/delta_rule_chunk.h"
#include "ops/gated_delta_rule/cpu_kernel.h"

namespace tokamax {

void gdn_chunked_task(const GdnProblem& p, const GdnTokens& x, int64_t chunk, int64_t r, int64_t h,
                      float* S, Tensor& out) {
  const int64_t dk = p.d_k, dv = p.d_v, n_v = p.n_v, hk = h / p.repeat();
  const int64_t c = chunk;
  // kk and qk [2c, c] (for a chunk of n, [n, n] each, stacked), A, P [c, c]; kq [2c, dk]; kd [c,
  // dk]; sd [dk]; uo [2c, dv]; two exponent rows [c]. The cumulative log decays in double: their
  // differences decide every decay factor.
  thread_local std::vector<float> scratch;
  thread_local std::vector<double> cumulative;
  thread_local GemmPackStorage packed_k, packed_kq;
  const int64_t need = 4 * c * c + 3 * c * dk + dk + 2 * c * dv + 2 * c;
  if (static_cast<int64_t>(scratch.size()) < need) scratch.resize(static_cast<size_t>(need));
  if (static_cast<int64_t>(cumulative.size()) < c) cumulative.resize(static_cast<size_t>(c));
  float* kk = scratch.data();
  float* A = kk + 2 * c * c;
  float* P = A + c * c;
  float* kq = P + c * c;
  float* kd = kq + 2 * c * dk;
  float* sd = kd + c * dk;
  float* uo = sd + dk;
  float* to_t = uo + 2 * c * dv;  // exp(b_t)
  float* to_end = to_t + c;       // exp(b_{n-1} - b_t)
  double* b = cumulative.data();
  const int64_t out_size = static_cast<int64_t>(dtype_size(p.dtype));
  const int64_t start = p.query_start_loc[r], L = p.tokens(r);
  const CpuGemmOptions in_place{.rhs_in_place = true};
  for (int64_t j0 = 0; j0 < L; j0 += c) {
    const int64_t n = std::min(c, L - j0), t0 = start + j0;
    const GdnHeadMajor rows = p.head_major();
    const float* q = x.mixed + rows.q(t0, hk);  // [n, dk] each
    const float* k = x.mixed + rows.k(t0, hk);
    const float* v = x.mixed + rows.v(t0, h);   // [n, dv]
    const float* beta = x.beta + t0 * n_v + h;  // stride n_v
    double sum = 0.0;
    for (int64_t t = 0; t < n; ++t) b[t] = sum += x.log_decay[(t0 + t) * n_v + h];
    // [k; q] packed once for its two products: [k; q] k^T (k k^T over q k^T) and [k; q] S_0.
    std::copy_n(k, n * dk, kq);
    std::copy_n(q, n * dk, kq + n * dk);
    const PackedGemmOperand stacked =
        pack_gemm_lhs({DType::kF32, kq, dk}, 2 * n, dk, in_place, packed_kq);
    GemmOperand k_t{DType::kF32, k, dk};
    k_t.transposed = true;
    const PackedGemmOperand keys = pack_gemm_rhs(k_t, dk, n, in_place, packed_k);
    cpu_gemm_f32(stacked, keys, kk, n, /*accumulate=*/false, in_place);
    const float* qk = kk + n * n;
    for (int64_t t = 0; t < n; ++t) {
      // P's row t holds the exponents b_t - b_s (s <= t), then their exps; A's row uses them.
      float* pr = P + t * n;
      float* ar = A + t * n;
      for (int64_t s = 0; s <= t; ++s) pr[s] = static_cast<float>(b[t] - b[s]);
      delta_rule_exp(pr, t + 1);
      const float bt = beta[t * n_v];
      for (int64_t s = 0; s < t; ++s) ar[s] = bt * pr[s] * kk[t * n + s];
      for (int64_t s = 0; s <= t; ++s) pr[s] *= qk[t * n + s];
      for (int64_t s = t + 1; s < n; ++s) pr[s] = 0.0f;
      to_t[t] = static_cast<float>(b[t]);
      to_end[t] = static_cast<float>(b[n - 1] - b[t]);
    }
    delta_rule_exp(to_t, n);
    delta_rule_exp(to_end, n);
    // [Y; out] = [beta v; 0] + [-beta k exp(b); q exp(b)] S_0: the product with the unscaled
    // rows, each row then scaled by its token's factor.
    cpu_gemm_f32(stacked, {DType::kF32, S, dv}, dv, uo, dv, /*accumulate=*/false, in_place);
    for (int64_t t = 0; t < n; ++t) {
      const float bt = beta[t * n_v], et = to_t[t];
      delta_rule_axpby(v + t * dv, bt, -bt * et, uo + t * dv, dv);
      delta_rule_scale(uo + (n + t) * dv, et, uo + (n + t) * dv, dv);
      delta_rule_scale(k + t * dk, to_end[t], kd + t * dk, dk);
    }
    std::fill_n(sd, dk, to_t[n - 1]);
    delta_rule_chunk_update(
        {.n = n, .K = dk, .V = dv, .A = A, .P = P, .kq = nullptr, .kd = kd, .sd = sd, .uo = uo}, S);
    char* out_rows = static_cast<char*>(out.raw()) + (t0 * n_v + h) * dv * out_size;
    store_rows(uo + n * dv, dv, n, dv, p.dtype, out_rows, n_v * dv);
  }
}

}  // namespace tokamax
