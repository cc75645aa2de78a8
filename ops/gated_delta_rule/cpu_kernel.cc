// gated_delta_rule on CPU: the config and the per-(request, value head) driver of the recurrence
// (cpu_kernel.h).
//
// Dimensions: as base.h.
#include "ops/gated_delta_rule/cpu_kernel.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/delta_rule_rows.h"
#include "ops/framework/config.h"
#include "ops/framework/dtype_dispatch.h"

namespace tokamax {
namespace {

void l2_normalize(float* x, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float rnorm = 1.0f / std::sqrt(sum + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] *= rnorm;
}

}  // namespace

void CpuGdnConfig::validate() const {
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
}

void gated_delta_rule_cpu_kernel(const GdnProblem& p, const CpuGdnConfig& c,
                                 const TensorMap& inputs, TensorMap& outputs) {
  const int64_t C = p.C, dk = p.d_k, dv = p.d_v, KV = dk * dv, n_v = p.n_v;
  std::vector<float> mixed(static_cast<size_t>(p.T * C));
  gdn_conv_silu(p, inputs, c.num_threads, mixed.data(), outputs.at("updated_conv_state"));
  Tensor& out = outputs.at("out");
  std::memset(out.raw(), 0, out.size_bytes());  // padding tokens
  Tensor& state = outputs.at("updated_recurrent_state");
  std::memcpy(state.raw(), inputs.at("recurrent_state").raw(), state.size_bytes());
  // The per-head scalars as f32.
  std::vector<float> a_log(static_cast<size_t>(n_v)), dt_bias(static_cast<size_t>(n_v));
  for (int64_t h = 0; h < n_v; ++h) {
    a_log[h] = static_cast<float>(inputs.at("a_log").get(h));
    dt_bias[h] = static_cast<float>(inputs.at("dt_bias").get(h));
  }
  const Tensor& a_in = inputs.at("a");
  const Tensor& b_in = inputs.at("b");
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  const int64_t out_size = static_cast<int64_t>(dtype_size(p.dtype));
  dispatch_float(p.state_dtype, [&](auto type) {
    using S_t = decltype(type);
    S_t* states = state.data<S_t>();
    cpu::parallel_for(p.R * n_v, c.num_threads, [&](int64_t task, int) {
      const int64_t r = task / n_v, h = task % n_v, hk = h / p.repeat();
      S_t* slot = states + (p.state_indices[r] * n_v + h) * KV;
      thread_local std::vector<float> scratch;
      // The state [dk, dv], then two token buffers (this token's and the next one's: q, k,
      // decay, beta k [dk] and v [dv]), r, pred and out [dv].
      const int64_t token_floats = 4 * dk + dv;
      const int64_t need = KV + 2 * token_floats + 3 * dv;
      if (static_cast<int64_t>(scratch.size()) < need) scratch.resize(static_cast<size_t>(need));
      float* S = scratch.data();
      if (p.has_initial_state(r)) {
        for (int64_t e = 0; e < KV; ++e) S[e] = to_float(slot[e]);
      } else {
        std::fill_n(S, KV, 0.0f);
      }
      struct Token {
        float *q, *k, *decay, *bk, *v;
      };
      auto token_at = [&](int i) {
        float* base = S + KV + i * token_floats;
        return Token{base, base + dk, base + 2 * dk, base + 3 * dk, base + 4 * dk};
      };
      Token cur = token_at(0), next = token_at(1);
      float* rv = S + KV + 2 * token_floats;
      float* pred = rv + dv;
      float* o = pred + dv;
      // A token's q and k normalized (q scaled), exp(g) in every row, beta k, v.
      auto load_token = [&](int64_t t, const Token& x) {
        const float* y = mixed.data() + t * C;
        std::memcpy(x.q, y + hk * dk, static_cast<size_t>(dk) * sizeof(float));
        std::memcpy(x.k, y + (p.n_kq + hk) * dk, static_cast<size_t>(dk) * sizeof(float));
        std::memcpy(x.v, y + 2 * p.n_kq * dk + h * dv, static_cast<size_t>(dv) * sizeof(float));
        l2_normalize(x.q, dk);
        l2_normalize(x.k, dk);
        const float beta = gdn_beta<float>(static_cast<float>(b_in.get(t * n_v + h)));
        const float decay = std::exp(
            gdn_log_decay<float>(static_cast<float>(a_in.get(t * n_v + h)), a_log[h], dt_bias[h]));
        for (int64_t i = 0; i < dk; ++i) {
          x.q[i] *= scale;
          x.bk[i] = beta * x.k[i];
          x.decay[i] = decay;
        }
      };
      const int64_t L = r < p.active() ? p.tokens(r) : 0;
      const int64_t start = p.query_start_loc[r];
      for (int64_t j = 0; j < L; ++j) {
        const int64_t t = start + j;
        if (j == 0) {
          load_token(t, cur);
          delta_rule_decay_predict(S, cur.decay, cur.k, dk, dv, pred);
        }
        for (int64_t x = 0; x < dv; ++x) rv[x] = cur.v[x] - pred[x];
        if (j + 1 < L) {
          load_token(t + 1, next);
          delta_rule_update_decay(S, cur.bk, rv, cur.q, next.decay, next.k, dk, dv, o, pred);
          std::swap(cur, next);
        } else {
          delta_rule_update_output(S, cur.bk, rv, cur.q, dk, dv, o);
        }
        char* out_row = static_cast<char*>(out.raw()) + (t * n_v + h) * dv * out_size;
        store_rows(o, dv, 1, dv, p.dtype, out_row, dv);
      }
      for (int64_t e = 0; e < KV; ++e) slot[e] = from_double<S_t>(S[e]);
    });
  });
}

}  // namespace tokamax
