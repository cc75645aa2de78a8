// kimi_delta_attention on CPU: the config, the per-(head, batch row) driver and the token-by-token
// runs (cpu_kernel.h); the chunked runs are in cpu_chunk.cc, the decay rows in cpu_rows.cc.
//
// Dimensions: as base.h.
#include "ops/kimi_delta_attention/cpu_kernel.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/denormals.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/delta_rule_rows.h"
#include "ops/framework/config.h"

namespace tokamax {

void kda_load_row(const Tensor& x, int64_t row, int64_t n, float* out) {
  const char* data = static_cast<const char*>(x.raw());
  delta_rule_load_state(x.dtype(), data + row * n * static_cast<int64_t>(dtype_size(x.dtype())),
                        out, n);
}

void CpuKdaConfig::validate() const {
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
  require_config(chunk >= 0 && chunk <= kMaxKdaChunk, "chunk", [&] {
    return "chunk is " + std::to_string(chunk) + "; expected 0 (token by token) to " +
           std::to_string(kMaxKdaChunk) + " tokens";
  });
}

float kda_load_token(const KdaTaskRows& x, int64_t t, bool log, float* q, float* k, float* v,
                     float* decay) {
  const KdaProblem& p = x.p;
  const int64_t row = x.row(t);
  kda_load_row(x.query, row, p.K, q);
  kda_load_row(x.key, row, p.K, k);
  kda_load_row(x.gate, row, p.K, decay);
  kda_load_row(x.value, row, p.V, v);
  float beta = 0.0f;
  kda_load_row(x.beta, row, 1, &beta);
  const float scale = static_cast<float>(p.scale);
  if (p.use_qk_l2norm) {
    delta_rule_l2_normalize(q, p.K, 1, p.K, scale, q, p.K);
    delta_rule_l2_normalize(k, p.K, 1, p.K, 1.0f, k, p.K);
  } else {
    for (int64_t i = 0; i < p.K; ++i) q[i] *= scale;
  }
  if (log) {
    kda_log_decay_row(p, x.a_log, decay, x.bias, p.K, decay);
  } else {
    kda_decay_row(p, x.a_log, decay, x.bias, p.K, decay);
  }
  return beta;
}

void kda_token_run(const KdaTaskRows& x, int64_t t0, int64_t t1, float* S, DType src_dtype,
                   const void* src, float* dst) {
  const int64_t K = x.p.K, V = x.p.V;
  // Two token buffers (this token's, the next one's), each q, k, decay, beta k [K] and v [V];
  // r and pred [V], out [V].
  thread_local std::vector<float> rows;
  const int64_t token_floats = 4 * K + V;
  if (static_cast<int64_t>(rows.size()) < 2 * token_floats + 3 * V) {
    rows.resize(2 * token_floats + 3 * V);
  }
  struct Token {
    float *q, *k, *decay, *bk, *v;
  };
  auto token_at = [&](int i) {
    float* base = rows.data() + i * token_floats;
    return Token{base, base + K, base + 2 * K, base + 3 * K, base + 4 * K};
  };
  auto load = [&](int64_t t, const Token& tok) {
    const float beta = kda_load_token(x, t, /*log=*/false, tok.q, tok.k, tok.v, tok.decay);
    for (int64_t i = 0; i < K; ++i) tok.bk[i] = beta * tok.k[i];
  };
  Token cur = token_at(0), next = token_at(1);
  float* r = rows.data() + 2 * token_floats;
  float* pred = r + V;
  float* o = pred + V;
  const int64_t out_size = static_cast<int64_t>(dtype_size(x.out.dtype()));
  load(t0, cur);
  // A run of one token from memory to memory needs no f32 copy of the state: its second pass
  // reads the stored state again.
  const bool single = src && dst && t1 - t0 == 1;
  if (src) {
    delta_rule_decay_predict_from(src_dtype, src, single ? nullptr : S, cur.decay, cur.k, K, V,
                                  pred);
  } else {
    delta_rule_decay_predict(S, cur.decay, cur.k, K, V, pred);
  }
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t i = 0; i < V; ++i) r[i] = cur.v[i] - pred[i];
    if (t + 1 < t1) {
      load(t + 1, next);
      delta_rule_update_decay(S, cur.bk, r, cur.q, next.decay, next.k, K, V, o, pred);
      std::swap(cur, next);
    } else if (single) {
      delta_rule_update_output_to(src_dtype, src, cur.decay, cur.bk, r, cur.q, K, V, o, DType::kF32,
                                  dst);
    } else if (dst) {
      delta_rule_update_output_to(DType::kF32, S, nullptr, cur.bk, r, cur.q, K, V, o, DType::kF32,
                                  dst);
    } else {
      delta_rule_update_output(S, cur.bk, r, cur.q, K, V, o);
    }
    char* out_row = static_cast<char*>(x.out.raw()) + x.row(t) * V * out_size;
    store_rows(o, V, 1, V, x.out.dtype(), out_row, V);
  }
}

void kimi_delta_attention_cpu_kernel(const KdaProblem& p, const CpuKdaConfig& c,
                                     const TensorMap& inputs, TensorMap& outputs) {
  const int64_t H = p.H, B = p.B, T = p.T, K = p.K, V = p.V, N = p.N, KV = K * V;
  const int32_t* ids = p.has_segments ? inputs.at("segment_ids").data<int32_t>() : nullptr;
  float* states = p.output_final_state ? outputs.at("final_state").data<float>() : nullptr;
  const Tensor* init = p.has_initial_state ? &inputs.at("initial_state") : nullptr;
  std::vector<float> a_log(static_cast<size_t>(H), 0.0f), dtb(static_cast<size_t>(H * K), 0.0f);
  if (inputs.contains("a_log")) kda_load_row(inputs.at("a_log"), 0, H, a_log.data());
  if (inputs.contains("delta_time_bias"))
    kda_load_row(inputs.at("delta_time_bias"), 0, H * K, dtb.data());
  Tensor& out = outputs.at("out");
  const int64_t out_size = static_cast<int64_t>(dtype_size(out.dtype()));
  cpu::parallel_for(H * B, c.num_threads, [&](int64_t task, int) {
    const int64_t h = task / B, b = task % B;
    const cpu::ScopedFlushDenormals flush;  // the decayed products (denormals.h says why)
    thread_local std::vector<float> scratch;
    // The N slots of (b, h): in final_state ([B, N, H, K, V]) or the scratch ([N, K, V]).
    if (!states && static_cast<int64_t>(scratch.size()) < N * KV) scratch.resize(N * KV);
    auto slot = [&](int64_t n) {
      return states ? states + ((b * N + n) * H + h) * KV : scratch.data() + n * KV;
    };
    // A slot's state is set up before its first run, or read by that run's first pass
    // (token by token from initial_state: no separate copy), and at the end for slots no token
    // used.
    std::vector<char> ready(static_cast<size_t>(N), 0);
    auto init_row = [&](int64_t n) {
      const int64_t size = static_cast<int64_t>(dtype_size(init->dtype()));
      return static_cast<const char*>(init->raw()) + ((b * N + n) * H + h) * KV * size;
    };
    auto set_up = [&](int64_t n) {
      if (ready[n]) return;
      ready[n] = 1;
      if (init) {
        kda_load_row(*init, (b * N + n) * H + h, KV, slot(n));
      } else {
        std::memset(slot(n), 0, static_cast<size_t>(KV) * sizeof(float));
      }
    };
    auto slot_of = [&](int64_t t) -> int64_t {
      const int64_t seg = ids ? ids[b * T + t] : 1;
      return seg < 1 || seg > N ? -1 : seg - 1;
    };
    // Runs of consecutive tokens per slot: a slot's only run, token by token into final_state,
    // reads its state in the first pass and writes it in the last (non-temporally, no read of
    // final_state's lines), the state in between in the task's scratch.
    std::vector<int64_t> runs(static_cast<size_t>(N), 0);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = slot_of(t);
      if (n >= 0 && (t == 0 || slot_of(t - 1) != n)) ++runs[n];
    }
    thread_local std::vector<float> work;
    const KdaTaskRows x{.p = p,
                        .query = inputs.at("query"),
                        .key = inputs.at("key"),
                        .value = inputs.at("value"),
                        .gate = inputs.at("gate"),
                        .beta = inputs.at("beta"),
                        .h = h,
                        .b = b,
                        .a_log = a_log[h],
                        .bias = dtb.data() + h * K,
                        .out = out};
    for (int64_t t = 0; t < T;) {
      const int64_t n = slot_of(t);
      int64_t end = t + 1;
      while (end < T && slot_of(end) == n) ++end;
      if (n < 0) {  // padding: zeros, no state changes
        char* out_rows = static_cast<char*>(out.raw()) + x.row(t) * V * out_size;
        std::memset(out_rows, 0, static_cast<size_t>((end - t) * V * out_size));
      } else if (c.chunk > 0 && end - t > 1) {
        set_up(n);
        kda_chunked_run(x, c.chunk, t, end, slot(n));
      } else if (!ready[n] && states && runs[n] == 1) {
        ready[n] = 1;
        if (static_cast<int64_t>(work.size()) < KV) work.resize(static_cast<size_t>(KV));
        if (!init) std::fill_n(work.data(), KV, 0.0f);
        kda_token_run(x, t, end, work.data(), init ? init->dtype() : DType::kF32,
                      init ? init_row(n) : nullptr, slot(n));
      } else if (!ready[n] && init) {
        ready[n] = 1;
        kda_token_run(x, t, end, slot(n), init->dtype(), init_row(n));
      } else {
        set_up(n);
        kda_token_run(x, t, end, slot(n));
      }
      t = end;
    }
    for (int64_t n = 0; n < N; ++n) set_up(n);
  });
}

}  // namespace tokamax
