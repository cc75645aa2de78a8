// kimi_delta_attention_vjp on CPU: the config and the per-(head, batch row) driver (cpu_kernel.h).
//
// Dimensions: as ../base.h; C the block (tokens per checkpoint).
#include "ops/kimi_delta_attention/vjp/cpu_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/denormals.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/delta_rule_chunk.h"
#include "ops/common/delta_rule_rows.h"
#include "ops/framework/config.h"
#include "ops/kimi_delta_attention/cpu_kernel.h"

namespace tokamax {
namespace {

// n f32 values stored into a tensor's elements [first, first + n) in its dtype.
void store_span(const float* x, int64_t first, int64_t n, Tensor& out) {
  const int64_t size = static_cast<int64_t>(dtype_size(out.dtype()));
  store_rows(x, n, 1, n, out.dtype(), static_cast<char*>(out.raw()) + first * size, n);
}
// Row `row` of a tensor of rows of n elements.
void store_row(const float* x, int64_t row, int64_t n, Tensor& out) {
  store_span(x, row * n, n, out);
}

// One token's forward rows in a block: q^, k^, q / n_q, the raw gate and d [K]; v, r [V]; beta
// and the norms.
struct TokenRows {
  float *q, *k, *qbar, *gate, *d, *v, *r;
  float beta, nq, nk;
};

}  // namespace

void CpuKdaVjpConfig::validate() const {
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
  require_config(block >= 1 && block <= kMaxKdaVjpBlock, "block", [&] {
    return "block is " + std::to_string(block) + "; expected 1 to " +
           std::to_string(kMaxKdaVjpBlock) + " tokens";
  });
}

void kimi_delta_attention_vjp_cpu_kernel(const KdaVjpProblem& vp, const CpuKdaVjpConfig& c,
                                         const TensorMap& inputs, TensorMap& outputs) {
  const KdaProblem& p = vp.fwd;
  const int64_t H = p.H, B = p.B, T = p.T, K = p.K, V = p.V, N = p.N, KV = K * V;
  const int64_t C = c.block, blocks = (T + C - 1) / C;
  const int32_t* ids = p.has_segments ? inputs.at("segment_ids").data<int32_t>() : nullptr;
  const Tensor* init = p.has_initial_state ? &inputs.at("initial_state") : nullptr;
  const Tensor* dfinal = vp.has_dfinal_state ? &inputs.at("dfinal_state") : nullptr;
  // The tensors a token reads and writes, looked up once (not per token).
  const Tensor &query = inputs.at("query"), &key = inputs.at("key"), &gate = inputs.at("gate");
  const Tensor &value = inputs.at("value"), &beta = inputs.at("beta"), &dout = inputs.at("dout");
  Tensor &dquery = outputs.at("dquery"), &dkey = outputs.at("dkey"), &dvalue = outputs.at("dvalue"),
         &dgate = outputs.at("dgate"), &dbeta_out = outputs.at("dbeta");
  std::vector<float> a_log(static_cast<size_t>(H), 0.0f), dtb(static_cast<size_t>(H * K), 0.0f);
  if (inputs.contains("a_log")) kda_load_row(inputs.at("a_log"), 0, H, a_log.data());
  if (inputs.contains("delta_time_bias"))
    kda_load_row(inputs.at("delta_time_bias"), 0, H * K, dtb.data());
  for (const char* name : {"dquery", "dkey", "dvalue", "dgate", "dbeta"}) {
    std::memset(outputs.at(name).raw(), 0, outputs.at(name).size_bytes());  // padding tokens
  }
  // Per task: da_log and ddelta_time_bias partial sums, added over the batch rows after.
  std::vector<float> da_part(static_cast<size_t>(H * B), 0.0f),
      dtb_part(static_cast<size_t>(H * B * K), 0.0f);
  const float scale = static_cast<float>(p.scale);
  cpu::parallel_for(H * B, c.num_threads, [&](int64_t task, int) {
    const int64_t h = task / B, b = task % B;
    const cpu::ScopedFlushDenormals flush;
    auto slot_of = [&](int64_t t) -> int64_t {
      const int64_t seg = ids ? ids[b * T + t] : 1;
      return seg < 1 || seg > N ? -1 : seg - 1;
    };
    // The slots' states [N, K, V] and adjoints [N, K, V]; the checkpoints [blocks, N, K, V]; the
    // block's states before each token [C, K, V] and its token rows [C, 5 K + 2 V].
    thread_local std::vector<float> states, adjoints, checkpoints, before, rows;
    states.resize(static_cast<size_t>(N * KV));
    adjoints.resize(static_cast<size_t>(N * KV));
    checkpoints.resize(static_cast<size_t>(blocks * N * KV));
    before.resize(static_cast<size_t>(C * KV));
    const int64_t row_floats = 5 * K + 2 * V;
    rows.resize(static_cast<size_t>(C * row_floats + 5 * K + 3 * V));
    for (int64_t n = 0; n < N; ++n) {
      if (init) {
        kda_load_row(*init, (b * N + n) * H + h, KV, states.data() + n * KV);
      } else {
        std::fill_n(states.data() + n * KV, KV, 0.0f);
      }
    }
    float* scratch = rows.data() + C * row_floats;
    float* bk = scratch;   // [K]
    float* pred = bk + K;  // [V]
    float* o = pred + V;   // [V]
    auto token_rows = [&](int64_t j) {
      float* base = rows.data() + j * row_floats;
      return TokenRows{base,         base + K,         base + 2 * K, base + 3 * K, base + 4 * K,
                       base + 5 * K, base + 5 * K + V, 0.0f,         1.0f,         1.0f};
    };
    // Token t's rows into x (its forward quantities but r; the decays d unless `chunk`, which
    // takes the log decays instead).
    auto load = [&](int64_t t, TokenRows& x, bool chunk = false) {
      const int64_t row = (h * B + b) * T + t;
      kda_load_row(query, row, K, x.q);
      kda_load_row(key, row, K, x.k);
      kda_load_row(gate, row, K, x.gate);
      kda_load_row(value, row, V, x.v);
      kda_load_row(beta, row, 1, &x.beta);
      if (p.use_qk_l2norm) {
        x.nq = std::sqrt(delta_rule_dot(x.q, x.q, K) + 1e-6f);
        x.nk = std::sqrt(delta_rule_dot(x.k, x.k, K) + 1e-6f);
      }
      delta_rule_scale(x.q, 1.0f / x.nq, x.qbar, K);
      delta_rule_scale(x.qbar, scale, x.q, K);
      delta_rule_scale(x.k, 1.0f / x.nk, x.k, K);
      if (!chunk) kda_decay_row(p, a_log[h], x.gate, dtb.data() + h * K, K, x.d);
    };
    std::vector<TokenRows> xs(static_cast<size_t>(C));
    // A chunk's rows: q^, k^, log decays, dq^, dk^, dg [C, K]; v, dv [C, V]; beta, dbeta [C].
    thread_local std::vector<float> chunk_rows;
    chunk_rows.resize(static_cast<size_t>(C * (6 * K + 2 * V + 2)));
    float* cq = chunk_rows.data();
    float* ck = cq + C * K;
    float* cg = ck + C * K;
    float* cdq = cg + C * K;
    float* cdk = cdq + C * K;
    float* cdg = cdk + C * K;
    float* cv = cdg + C * K;
    float* cdv = cv + C * V;
    float* cb = cdv + C * V;
    float* cdb = cb + C;
    // Per chunked block: its slot (-1: token by token), and the forward's residuals R0 [C, V]
    // and A' [C, C] for its backward (kda_chunk_advance).
    thread_local std::vector<int64_t> chunk_slot;
    thread_local std::vector<float> residuals;
    chunk_slot.assign(static_cast<size_t>(blocks), -1);
    if (c.chunked) residuals.resize(static_cast<size_t>(blocks * C * (V + C)));
    auto chunk_of = [&](int64_t blk, int64_t len) {
      float* r0 = residuals.data() + blk * C * (V + C);
      return KdaVjpChunk{.n = len,
                         .K = K,
                         .V = V,
                         .q = cq,
                         .k = ck,
                         .v = cv,
                         .g = cg,
                         .beta = cb,
                         .R0 = r0,
                         .Ap = r0 + C * V};
    };
    // Block [t0, t1)'s rows into xs and the chunk's rows when the block can run as one chunk:
    // one slot throughout, and gates the factors can take (kda_chunkable, unless `known` from
    // the forward's gather); returns the slot, or -1.
    auto gather = [&](int64_t t0, int64_t t1, bool known = false) -> int64_t {
      const int64_t n = slot_of(t0), len = t1 - t0;
      if (len < 2 || n < 0) return -1;
      for (int64_t t = t0 + 1; t < t1; ++t) {
        if (slot_of(t) != n) return -1;
      }
      for (int64_t j = 0; j < len; ++j) {
        TokenRows& x = xs[j];
        x = token_rows(j);
        x.q = cq + j * K;  // q^, k^ and v straight into the chunk's rows
        x.k = ck + j * K;
        x.v = cv + j * V;
        load(t0 + j, x, /*chunk=*/true);
        kda_log_decay_row(p, a_log[h], x.gate, dtb.data() + h * K, K, cg + j * K);
        cb[j] = x.beta;
      }
      if (!known && !kda_chunkable(cg, len, K)) return -1;
      return n;
    };
    // The forward over the tokens, the states checkpointed at each block's start: one pass per
    // token, the next token's decay and prediction riding on this one's update when both are
    // on one slot within the block.
    for (int64_t blk = 0; blk < blocks; ++blk) {
      std::copy_n(states.data(), N * KV, checkpoints.data() + blk * N * KV);
      const int64_t t1 = std::min(T, (blk + 1) * C);
      if (c.chunked) {  // the block as one chunk, when it can be
        const int64_t n = gather(blk * C, t1);
        if (n >= 0) {
          chunk_slot[blk] = n;
          kda_chunk_advance(chunk_of(blk, t1 - blk * C), states.data() + n * KV);
          continue;
        }
      }
      TokenRows cur = token_rows(0), next = token_rows(1);
      bool predicted = false;  // pred holds cur's prediction (and its slot its decay)
      for (int64_t t = blk * C; t < t1; ++t) {
        const int64_t n = slot_of(t);
        if (n < 0) continue;
        float* S = states.data() + n * KV;
        if (!predicted) {
          load(t, cur);
          delta_rule_decay_predict(S, cur.d, cur.k, K, V, pred);
        }
        for (int64_t e = 0; e < V; ++e) cur.r[e] = cur.v[e] - pred[e];
        for (int64_t i = 0; i < K; ++i) bk[i] = cur.beta * cur.k[i];
        predicted = t + 1 < t1 && slot_of(t + 1) == n;
        if (predicted) {
          load(t + 1, next);
          delta_rule_update_decay(S, bk, cur.r, cur.q, next.d, next.k, K, V, o, pred);
          std::swap(cur, next);
        } else {
          delta_rule_update_output(S, bk, cur.r, cur.q, K, V, o);
        }
      }
    }
    for (int64_t n = 0; n < N; ++n) {
      if (dfinal) {
        kda_load_row(*dfinal, (b * N + n) * H + h, KV, adjoints.data() + n * KV);
      } else {
        std::fill_n(adjoints.data() + n * KV, KV, 0.0f);
      }
    }
    // Per token of the block: dout [V], and pass 1's dq^, xr [K] and column sums [V].
    thread_local std::vector<float> backward;
    backward.resize(static_cast<size_t>(C * (3 * V + 2 * K) + K));
    float* douts = backward.data();
    float* dqhs = douts + C * V;
    float* xrs = dqhs + C * K;
    float* accs = xrs + C * K;
    float* dkh = accs + C * V;  // [K]
    float* dg = o + V;          // [K]: the scratch's tail
    std::vector<float> dr(static_cast<size_t>(V)), grad(static_cast<size_t>(K));
    std::vector<char> passed(static_cast<size_t>(C));  // pass 1 done (fused into the next's)
    float da = 0.0f;
    float* ddtb = dtb_part.data() + task * K;
    // A token's gradients from its forward rows and dq^, dk^, dv, dbeta and dg: stored, through
    // the normalization (dx = (dx^ - x^ (x^ . dx^)) / n_x, q^ scaled) and the gate.
    auto finish = [&](int64_t row, const TokenRows& x, const float* dvr, const float* dqh,
                      const float* dkh, const float* dgr) {
      store_row(dvr, row, V, dvalue);
      auto unnormalize = [&](const float* xbar, float nx, float s, const float* dxh, Tensor& out) {
        const float dot = p.use_qk_l2norm ? delta_rule_dot(xbar, dxh, K) : 0.0f;
        const float f = s / nx;
        for (int64_t i = 0; i < K; ++i) grad[i] = f * (dxh[i] - xbar[i] * dot);
        store_row(grad.data(), row, K, out);
      };
      unnormalize(x.qbar, x.nq, scale, dqh, dquery);
      unnormalize(x.k, x.nk, 1.0f, dkh, dkey);
      da += kda_vjp_gate_row(p, a_log[h], x.gate, dtb.data() + h * K, dgr, K, grad.data(), ddtb);
      store_row(grad.data(), row, K, dgate);
    };
    // Block [t0, t1) backward as one chunk, when it can be.
    auto run_chunk = [&](int64_t blk, int64_t t0, int64_t t1) {
      const int64_t n = chunk_slot[blk], len = t1 - t0;
      if (n < 0) return false;
      gather(t0, t1, /*known=*/true);
      for (int64_t j = 0; j < len; ++j) {
        kda_load_row(dout, (h * B + b) * T + t0 + j, V, douts + j * V);
      }
      KdaVjpChunk chunk = chunk_of(blk, len);
      chunk.S0 = checkpoints.data() + (blk * N + n) * KV;
      chunk.dout = douts;
      kda_vjp_chunk(chunk, adjoints.data() + n * KV, cdq, cdk, cdv, cdb, cdg);
      for (int64_t j = 0; j < len; ++j) {
        finish((h * B + b) * T + t0 + j, xs[j], cdv + j * V, cdq + j * K, cdk + j * K, cdg + j * K);
      }
      store_span(cdb, (h * B + b) * T + t0, len, dbeta_out);
      return true;
    };
    for (int64_t blk = blocks - 1; blk >= 0; --blk) {
      const int64_t t0 = blk * C, t1 = std::min(T, t0 + C);
      if (c.chunked && run_chunk(blk, t0, t1)) continue;
      std::copy_n(checkpoints.data() + blk * N * KV, N * KV, states.data());
      // The block's forward again in fused passes, each token's decayed state S' kept.
      bool predicted = false;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t n = slot_of(t);
        if (n < 0) continue;
        TokenRows& x = xs[t - t0];
        float* S = states.data() + n * KV;
        if (!predicted) {
          x = token_rows(t - t0);
          load(t, x);
          delta_rule_decay_predict(S, x.d, x.k, K, V, pred, before.data() + (t - t0) * KV);
        }
        for (int64_t e = 0; e < V; ++e) x.r[e] = x.v[e] - pred[e];
        for (int64_t i = 0; i < K; ++i) bk[i] = x.beta * x.k[i];
        predicted = t + 1 < t1 && slot_of(t + 1) == n;
        if (predicted) {
          TokenRows& next = xs[t + 1 - t0];
          next = token_rows(t + 1 - t0);
          load(t + 1, next);
          delta_rule_update_decay(S, bk, x.r, x.q, next.d, next.k, K, V, o, pred,
                                  before.data() + (t + 1 - t0) * KV);
        } else {
          delta_rule_update_output(S, bk, x.r, x.q, K, V, o);
        }
        kda_load_row(dout, (h * B + b) * T + t, V, douts + (t - t0) * V);
        passed[t - t0] = 0;
      }
      auto token_of = [&](int64_t t) {
        const TokenRows& x = xs[t - t0];
        return KdaVjpToken{x.q, x.k, x.d, x.r, douts + (t - t0) * V, x.beta};
      };
      for (int64_t t = t1 - 1; t >= t0; --t) {
        const int64_t n = slot_of(t);
        if (n < 0) continue;
        const TokenRows& x = xs[t - t0];
        const int64_t row = (h * B + b) * T + t, j = t - t0;
        const KdaVjpToken tok = token_of(t);
        const float* Sd = before.data() + j * KV;
        float* G = adjoints.data() + n * KV;
        if (!passed[j]) kda_vjp_pass1(tok, Sd, G, K, V, dqhs + j * K, accs + j * V, xrs + j * K);
        const float* dqh = dqhs + j * K;
        const float* xr = xrs + j * K;
        float dbeta = 0.0f;
        for (int64_t e = 0; e < V; ++e) dr[e] = x.beta * accs[j * V + e];
        for (int64_t i = 0; i < K; ++i) {
          dbeta += x.k[i] * xr[i];
          dkh[i] = x.beta * xr[i];
        }
        if (t > t0 && slot_of(t - 1) == n) {  // the token before on this slot: fused
          kda_vjp_pass2_pass1(tok, Sd, G, dr.data(), token_of(t - 1), Sd - KV, K, V, dkh, dg,
                              dqhs + (j - 1) * K, accs + (j - 1) * V, xrs + (j - 1) * K);
          passed[j - 1] = 1;
        } else {
          kda_vjp_pass2(tok, Sd, G, dr.data(), K, V, dkh, dg);
        }
        finish(row, x, dr.data(), dqh, dkh, dg);
        dbeta_out.set(row, dbeta);
      }
    }
    da_part[task] = da;
    if (p.has_initial_state) {
      Tensor& dinit = outputs.at("dinitial_state");
      for (int64_t n = 0; n < N; ++n) {
        store_row(adjoints.data() + n * KV, (b * N + n) * H + h, KV, dinit);
      }
    }
  });
  if (outputs.contains("da_log")) {
    for (int64_t h = 0; h < H; ++h) {
      float sum = 0.0f;
      for (int64_t b = 0; b < B; ++b) sum += da_part[h * B + b];
      outputs.at("da_log").set(h, sum);
    }
  }
  if (outputs.contains("ddelta_time_bias")) {
    for (int64_t e = 0; e < H * K; ++e) {
      float sum = 0.0f;
      for (int64_t b = 0; b < B; ++b) sum += dtb_part[(e / K * B + b) * K + e % K];
      outputs.at("ddelta_time_bias").set(e, sum);
    }
  }
}

}  // namespace tokamax
