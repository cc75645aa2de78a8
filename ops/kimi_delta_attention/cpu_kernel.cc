// kimi_delta_attention on CPU: the config and the per-(head, batch row) driver of the
// recurrence (cpu_kernel.h); the state's passes are in cpu_rows.cc.
//
// Dimensions: as base.h.
#include "ops/kimi_delta_attention/cpu_kernel.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/delta_rule_rows.h"
#include "ops/framework/config.h"

namespace tokamax {
namespace {

// Row `row` of a tensor (f32, bf16 or f16) of rows of n elements, as f32.
void load_row(const Tensor& x, int64_t row, int64_t n, float* out) {
  const char* data = static_cast<const char*>(x.raw());
  delta_rule_load_state(x.dtype(), data + row * n * static_cast<int64_t>(dtype_size(x.dtype())),
                        out, n);
}

}  // namespace

void CpuKdaConfig::validate() const {
  require_config(num_threads >= 0, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + "; expected >= 0 (0 = all cores)";
  });
}

void kimi_delta_attention_cpu_kernel(const KdaProblem& p, const CpuKdaConfig& c,
                                     const TensorMap& inputs, TensorMap& outputs) {
  const int64_t H = p.H, B = p.B, T = p.T, K = p.K, V = p.V, N = p.N, KV = K * V;
  const int32_t* ids = p.has_segments ? inputs.at("segment_ids").data<int32_t>() : nullptr;
  float* states = p.output_final_state ? outputs.at("final_state").data<float>() : nullptr;
  const Tensor* init = p.has_initial_state ? &inputs.at("initial_state") : nullptr;
  std::vector<float> a_log(static_cast<size_t>(H), 0.0f), dtb(static_cast<size_t>(H * K), 0.0f);
  if (inputs.contains("a_log")) load_row(inputs.at("a_log"), 0, H, a_log.data());
  if (inputs.contains("delta_time_bias"))
    load_row(inputs.at("delta_time_bias"), 0, H * K, dtb.data());
  Tensor& out = outputs.at("out");
  const int64_t out_size = static_cast<int64_t>(dtype_size(out.dtype()));
  cpu::parallel_for(H * B, c.num_threads, [&](int64_t task, int) {
    const int64_t h = task / B, b = task % B;
    thread_local std::vector<float> scratch, rows;
    // The N slots of (b, h): in final_state ([B, N, H, K, V]) or the scratch ([N, K, V]).
    if (!states && static_cast<int64_t>(scratch.size()) < N * KV) scratch.resize(N * KV);
    auto slot = [&](int64_t n) {
      return states ? states + ((b * N + n) * H + h) * KV : scratch.data() + n * KV;
    };
    for (int64_t n = 0; n < N; ++n) {
      if (init) {
        load_row(*init, (b * N + n) * H + h, KV, slot(n));
      } else {
        std::memset(slot(n), 0, static_cast<size_t>(KV) * sizeof(float));
      }
    }
    // Two token buffers (this token's, the next one's), each q, k, decay, beta k [K] and v [V];
    // r and pred [V], out [V].
    const int64_t token_floats = 4 * K + V + 1;
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
    Token cur = token_at(0), next = token_at(1);
    float* r = rows.data() + 2 * token_floats;
    float* pred = r + V;
    float* o = pred + V;
    auto slot_of = [&](int64_t t) -> int64_t {
      const int64_t seg = ids ? ids[b * T + t] : 1;
      return seg < 1 || seg > N ? -1 : seg - 1;
    };
    // A token's inputs: q and k normalized (and q scaled), exp(g), beta k.
    auto load_token = [&](int64_t t, const Token& x) {
      const int64_t row = (h * B + b) * T + t;
      load_row(inputs.at("query"), row, K, x.q);
      load_row(inputs.at("key"), row, K, x.k);
      load_row(inputs.at("gate"), row, K, x.decay);
      load_row(inputs.at("value"), row, V, x.v);
      float beta = 0.0f;
      load_row(inputs.at("beta"), row, 1, &beta);
      if (p.use_qk_l2norm) {
        delta_rule_l2_normalize(x.q, K, 1, K, 1.0f, x.q, K);
        delta_rule_l2_normalize(x.k, K, 1, K, 1.0f, x.k, K);
      }
      kda_decay_row(p, a_log[h], x.decay, dtb.data() + h * K, K, x.decay);
      for (int64_t i = 0; i < K; ++i) {
        x.q[i] *= static_cast<float>(p.scale);
        x.bk[i] = beta * x.k[i];
      }
    };
    bool predicted = false;  // pred holds this token's prediction (and S its decay)
    for (int64_t t = 0; t < T; ++t) {
      char* out_row = static_cast<char*>(out.raw()) + ((h * B + b) * T + t) * V * out_size;
      const int64_t n = slot_of(t);
      if (n < 0) {  // padding: zeros, no state changes
        std::memset(out_row, 0, static_cast<size_t>(V * out_size));
        continue;
      }
      float* S = slot(n);
      if (!predicted) {
        load_token(t, cur);
        delta_rule_decay_predict(S, cur.decay, cur.k, K, V, pred);
      }
      for (int64_t x = 0; x < V; ++x) r[x] = cur.v[x] - pred[x];
      predicted = t + 1 < T && slot_of(t + 1) == n;
      if (predicted) {
        load_token(t + 1, next);
        delta_rule_update_decay(S, cur.bk, r, cur.q, next.decay, next.k, K, V, o, pred);
        std::swap(cur, next);
      } else {
        delta_rule_update_output(S, cur.bk, r, cur.q, K, V, o);
      }
      store_rows(o, V, 1, V, out.dtype(), out_row, V);
    }
  });
}

}  // namespace tokamax
