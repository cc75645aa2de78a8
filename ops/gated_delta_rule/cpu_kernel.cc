// gated_delta_rule on CPU: the config, the per-(request, value head) driver and its token-by-token
// recurrence (cpu_kernel.h); the chunked form is in cpu_chunk.cc.
//
// Dimensions: as base.h.
#include "ops/gated_delta_rule/cpu_kernel.h"

#include <algorithm>
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
// Tasks per thread that a decode batch's tasks should leave for dynamic balancing.
constexpr int64_t kDecodeTasksPerThread = 8;

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

namespace {

// Request r's value head h (the kernel's task body): its state from `src` (or zeros without an
// initial state) to `dst`, in chunks or token by token; `next` the next head's stored state, for
// a single token's pass to prefetch.
void gdn_head_task(const GdnProblem& p, const GdnTokens& x, int64_t chunk, int64_t r, int64_t h,
                   const char* src, char* dst, const char* next, Tensor& out) {
  const int64_t dk = p.d_k, dv = p.d_v, KV = dk * dv, hk = h / p.repeat();
  thread_local std::vector<float> scratch;
  // The state [dk, dv]; two token buffers (this token's and the next one's decay and beta k
  // [dk]); r, pred and out [dv].
  const int64_t need = KV + 4 * dk + 3 * dv;
  if (static_cast<int64_t>(scratch.size()) < need) scratch.resize(static_cast<size_t>(need));
  float* S = scratch.data();
  const int64_t L = r < p.active() ? p.tokens(r) : 0;
  const bool from_slot = p.has_initial_state(r);
  // Token by token, the state comes from its slot within the first token's pass and goes back
  // within the last one's; otherwise it is loaded and stored whole.
  const bool by_token = L > 0 && !(chunk > 0 && L > 1);
  if (!by_token) {
    if (from_slot) {
      delta_rule_load_state(p.state_dtype, src, S, KV);
    } else {
      std::fill_n(S, KV, 0.0f);
    }
    if (L > 0) gdn_chunked_task(p, x, chunk, r, h, S, out);
    delta_rule_store_state(p.state_dtype, S, dst, KV);
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
  const GdnHeadMajor rows = p.head_major();
  const int64_t n_v = p.n_v;
  // Token t's operands: q, k, v where the prep pass left them, exp(g) in every row, beta k.
  auto token = [&](int64_t t, int which) {
    Token y{x.mixed + rows.q(t, hk), x.mixed + rows.k(t, hk), x.mixed + rows.v(t, h),
            buffers + which * 2 * dk, buffers + which * 2 * dk + dk};
    const float d = std::exp(x.log_decay[t * n_v + h]), bt = x.beta[t * n_v + h];
    for (int64_t i = 0; i < dk; ++i) {
      y.decay[i] = d;
      y.bk[i] = bt * y.k[i];
    }
    return y;
  };
  // One token from the slot: its second pass reads the stored state again (no f32 copy).
  const bool single = p.decodes(r);
  const int64_t out_size = static_cast<int64_t>(dtype_size(p.dtype));
  const int64_t start = p.query_start_loc[r];
  Token cur = token(start, 0);
  if (from_slot) {
    delta_rule_decay_predict_from(p.state_dtype, src, single ? nullptr : S, cur.decay, cur.k, dk,
                                  dv, pred);
  } else {
    std::fill_n(S, KV, 0.0f);
    std::fill_n(pred, dv, 0.0f);
  }
  for (int64_t j = 0; j < L; ++j) {
    const int64_t t = start + j;
    for (int64_t c = 0; c < dv; ++c) rv[c] = cur.v[c] - pred[c];
    if (j + 1 < L) {
      const Token following = token(t + 1, (j + 1) % 2);
      delta_rule_update_decay(S, cur.bk, rv, cur.q, following.decay, following.k, dk, dv, o, pred);
      cur = following;
    } else if (single) {
      delta_rule_update_output_to(p.state_dtype, src, cur.decay, cur.bk, rv, cur.q, dk, dv, o,
                                  p.state_dtype, dst, next);
    } else {
      delta_rule_update_output_to(DType::kF32, S, nullptr, cur.bk, rv, cur.q, dk, dv, o,
                                  p.state_dtype, dst);
    }
    char* out_row = static_cast<char*>(out.raw()) + (t * n_v + h) * dv * out_size;
    store_rows(o, dv, 1, dv, p.dtype, out_row, dv);
  }
}

}  // namespace

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
  // Padding tokens output zeros; every valid token's rows are written by its request's tasks.
  Tensor& out = outputs.at("out");
  const size_t token_bytes = static_cast<size_t>(n_v * p.d_v) * dtype_size(p.dtype);
  std::memset(static_cast<char*>(out.raw()) + valid * token_bytes, 0, (p.T - valid) * token_bytes);
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
  char* states = static_cast<char*>(state.raw());
  const int64_t state_size = static_cast<int64_t>(dtype_size(p.state_dtype));
  // Tasks of consecutive value heads of one request: a request of one token from its slot (a
  // decode) takes `decode_heads`, each head's pass prefetching the next one's state (contiguous
  // in the slot) so that its reads overlap the stores, as many as still leave each thread about
  // kDecodeTasksPerThread tasks to balance; any other request one head per task.
  int64_t decodes = 0;
  for (int64_t r = 0; r < p.active(); ++r) decodes += p.decodes(r);
  const int threads = cpu::thread_pool().threads_for(decodes * n_v, c.num_threads);
  const int64_t decode_heads =
      std::clamp<int64_t>(decodes * n_v / (kDecodeTasksPerThread * threads), 1, n_v);
  struct Task {
    int64_t r, h0, h1;
  };
  std::vector<Task> tasks;
  for (int64_t r = 0; r < p.R; ++r) {
    const int64_t heads = p.decodes(r) ? decode_heads : 1;
    for (int64_t h = 0; h < n_v; h += heads) tasks.push_back({r, h, std::min(n_v, h + heads)});
  }
  cpu::parallel_for(static_cast<int64_t>(tasks.size()), c.num_threads, [&](int64_t index, int) {
    const cpu::ScopedFlushDenormals flush;  // the decayed products (denormals.h says why)
    const auto [r, h0, h1] = tasks[index];
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t at = (p.state_indices[r] * n_v + h) * KV * state_size;
      gdn_head_task(p, x, c.chunk, r, h, old_states + at, states + at,
                    h + 1 < h1 ? old_states + at + KV * state_size : nullptr, out);
    }
  });
}

}  // namespace tokamax
