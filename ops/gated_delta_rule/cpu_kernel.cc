// gated_delta_rule on CPU: the config, the per-(request, value head) driver and its token-by-token
// recurrence (cpu_kernel.h); the chunked form is in cpu_chunk.cc.
//
// Dimensions: as base.h.
#include "ops/gated_delta_rule/cpu_kernel.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/denormals.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/delta_rule_rows.h"
#include "ops/framework/config.h"

namespace tokamax {
namespace {

// Rows per task of the normalization pass.
constexpr int64_t kNormalizeBlock = 256;

}  // namespace

void CpuGdnConfig::validate() const {
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
  require_config(chunk >= 0 && chunk <= kMaxGdnChunk, "chunk", [&] {
    return "chunk is " + std::to_string(chunk) + "; expected 0 (token by token) to " +
           std::to_string(kMaxGdnChunk) + " tokens";
  });
}

void gated_delta_rule_cpu_kernel(const GdnProblem& p, const CpuGdnConfig& c,
                                 const TensorMap& inputs, TensorMap& outputs) {
  const int64_t C = p.C, dk = p.d_k, dv = p.d_v, KV = dk * dv, n_v = p.n_v, n_kq = p.n_kq;
  // The call's buffers, grown once (a fresh [T, C] buffer per call faults in its pages: 8% of
  // a 4096-token prefill). The conv's output head-major: a task streams its own rows.
  thread_local cpu::ScratchBuffer buffer;
  const int64_t valid = p.query_start_loc[p.active()];
  float* mixed = buffer.floats(static_cast<size_t>(p.T * C + 2 * valid * n_v));
  float* log_decay = mixed + p.T * C;
  float* beta = log_decay + valid * n_v;
  gdn_conv_silu(p, inputs, c.num_threads, GdnConvLayout::kHeadMajor, mixed,
                outputs.at("updated_conv_state"));
  Tensor& out = outputs.at("out");
  std::memset(out.raw(), 0, out.size_bytes());  // padding tokens
  // Slots no request owns are copied through; each request's slot is written whole by its
  // tasks, from the input's (one read and one write of each state).
  Tensor& state = outputs.at("updated_recurrent_state");
  const char* old_states = static_cast<const char*>(inputs.at("recurrent_state").raw());
  const size_t slot_bytes = static_cast<size_t>(n_v * KV) * dtype_size(p.state_dtype);
  std::vector<bool> owned(static_cast<size_t>(p.NB), false);
  for (const int64_t slot : p.state_indices) owned[slot] = true;
  for (int64_t slot = 0; slot < p.NB; ++slot) {
    if (!owned[slot]) {
      std::memcpy(static_cast<char*>(state.raw()) + slot * slot_bytes,
                  old_states + slot * slot_bytes, slot_bytes);
    }
  }
  // Once, not once per value head reading them: q and k of each key head and valid token
  // normalized in place in `mixed` (q scaled); each value head's g and beta per valid token.
  std::vector<float> a_log(static_cast<size_t>(n_v)), dt_bias(static_cast<size_t>(n_v));
  for (int64_t h = 0; h < n_v; ++h) {
    a_log[h] = static_cast<float>(inputs.at("a_log").get(h));
    dt_bias[h] = static_cast<float>(inputs.at("dt_bias").get(h));
  }
  const Tensor& a_in = inputs.at("a");
  const Tensor& b_in = inputs.at("b");
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  const GdnHeadMajor rows = p.head_major();
  const int64_t blocks = (valid + kNormalizeBlock - 1) / kNormalizeBlock;
  cpu::parallel_for(2 * n_kq * blocks, c.num_threads, [&](int64_t task, int) {
    // The q heads then the k heads: 2 n_kq segments of [T, d_k] from rows.q(0, 0) on.
    const int64_t head = task / blocks, t0 = task % blocks * kNormalizeBlock;
    float* x = mixed + rows.q(t0, 0) + head * p.T * dk;
    delta_rule_l2_normalize(x, dk, std::min(kNormalizeBlock, valid - t0), dk,
                            head < n_kq ? scale : 1.0f, x, dk);
  });
  cpu::parallel_for(valid, c.num_threads, [&](int64_t t, int) {
    for (int64_t h = 0; h < n_v; ++h) {
      beta[t * n_v + h] = gdn_beta<float>(static_cast<float>(b_in.get(t * n_v + h)));
      log_decay[t * n_v + h] =
          gdn_log_decay<float>(static_cast<float>(a_in.get(t * n_v + h)), a_log[h], dt_bias[h]);
    }
  });
  const GdnTokens x{mixed, log_decay, beta};
  const int64_t out_size = static_cast<int64_t>(dtype_size(p.dtype));
  char* states = static_cast<char*>(state.raw());
  const int64_t state_size = static_cast<int64_t>(dtype_size(p.state_dtype));
  cpu::parallel_for(p.R * n_v, c.num_threads, [&](int64_t task, int) {
    const int64_t r = task / n_v, h = task % n_v, hk = h / p.repeat();
    const cpu::ScopedFlushDenormals flush;  // the decayed products (denormals.h says why)
    const int64_t at = (p.state_indices[r] * n_v + h) * KV * state_size;
    char* slot = states + at;
    thread_local std::vector<float> scratch;
    // The state [dk, dv]; two token buffers (this token's and the next one's decay and beta k
    // [dk]); r, pred and out [dv].
    const int64_t need = KV + 4 * dk + 3 * dv;
    if (static_cast<int64_t>(scratch.size()) < need) scratch.resize(static_cast<size_t>(need));
    float* S = scratch.data();
    const int64_t L = r < p.active() ? p.tokens(r) : 0;
    const bool from_slot = p.has_initial_state(r);
    // Token by token, the state comes from its slot within the first token's pass and goes
    // back within the last one's; otherwise it is loaded and stored whole.
    const bool by_token = L > 0 && !(c.chunk > 0 && L > 1);
    if (!by_token) {
      if (from_slot) {
        delta_rule_load_state(p.state_dtype, old_states + at, S, KV);
      } else {
        std::fill_n(S, KV, 0.0f);
      }
      if (L > 0) gdn_chunked_task(p, x, c.chunk, r, h, S, out);
      delta_rule_store_state(p.state_dtype, S, slot, KV);
      return;
    }
    struct Token {
      const float *q, *k, *v;
      float *decay, *bk;
    };
    float* buffers = S + KV;
    float* rv = buffers + 4 * dk;
    float* pred = rv + dv;
    float* o = pred + dv;
    // Token t's operands: q, k, v where the prep pass left them, exp(g) in every row, beta k.
    auto token = [&](int64_t t, int which) {
      Token x{mixed + rows.q(t, hk), mixed + rows.k(t, hk), mixed + rows.v(t, h),
              buffers + which * 2 * dk, buffers + which * 2 * dk + dk};
      const float d = std::exp(log_decay[t * n_v + h]), bt = beta[t * n_v + h];
      for (int64_t i = 0; i < dk; ++i) {
        x.decay[i] = d;
        x.bk[i] = bt * x.k[i];
      }
      return x;
    };
    const int64_t start = p.query_start_loc[r];
    Token cur{};
    for (int64_t j = 0; j < L; ++j) {
      const int64_t t = start + j;
      if (j == 0) {
        cur = token(t, 0);
        if (from_slot) {
          delta_rule_decay_predict_from(p.state_dtype, old_states + at, S, cur.decay, cur.k, dk, dv,
                                        pred);
        } else {
          std::fill_n(S, KV, 0.0f);
          std::fill_n(pred, dv, 0.0f);
        }
      }
      for (int64_t x = 0; x < dv; ++x) rv[x] = cur.v[x] - pred[x];
      if (j + 1 < L) {
        const Token next = token(t + 1, (j + 1) % 2);
        delta_rule_update_decay(S, cur.bk, rv, cur.q, next.decay, next.k, dk, dv, o, pred);
        cur = next;
      } else {
        delta_rule_update_output_to(S, cur.bk, rv, cur.q, dk, dv, o, p.state_dtype, slot);
      }
      char* out_row = static_cast<char*>(out.raw()) + (t * n_v + h) * dv * out_size;
      store_rows(o, dv, 1, dv, p.dtype, out_row, dv);
    }
  });
}

}  // namespace tokamax
