// kimi_delta_attention_vjp: the portable reference: sweep.h's backward in f32 per (head, batch
// row), da_log and ddelta_time_bias summed over the batch rows.
//
// Dimensions: as base.h.
#include "ops/framework/reference_implementation.h"
#include "ops/kimi_delta_attention/vjp/base.h"
#include "ops/kimi_delta_attention/vjp/sweep.h"

namespace tokamax {

void kimi_delta_attention_vjp_reference(const KdaVjpProblem& vp, const TensorMap& inputs,
                                        TensorMap& outputs) {
  const KdaProblem& p = vp.fwd;
  const int64_t H = p.H, B = p.B, T = p.T, K = p.K, V = p.V, N = p.N, KV = K * V;
  std::vector<float> da_log(H, 0.0f), ddtb(H * K, 0.0f);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t b = 0; b < B; ++b) {
      KdaVjpGrads<float, false> g;
      kda_vjp_sweep<float, false>(vp, inputs, h, b, g);
      const int64_t hb = h * B + b;
      for (int64_t e = 0; e < T * K; ++e) {
        outputs.at("dquery").set(hb * T * K + e, g.dq[e]);
        outputs.at("dkey").set(hb * T * K + e, g.dk[e]);
        outputs.at("dgate").set(hb * T * K + e, g.dgate[e]);
      }
      for (int64_t e = 0; e < T * V; ++e) outputs.at("dvalue").set(hb * T * V + e, g.dv[e]);
      for (int64_t t = 0; t < T; ++t) outputs.at("dbeta").set(hb * T + t, g.dbeta[t]);
      da_log[h] += g.da_log;
      for (int64_t i = 0; i < K; ++i) ddtb[h * K + i] += g.ddtb[i];
      if (outputs.contains("dinitial_state")) {
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t e = 0; e < KV; ++e) {
            outputs.at("dinitial_state").set(((b * N + n) * H + h) * KV + e, g.dinit[n * KV + e]);
          }
        }
      }
    }
  }
  if (outputs.contains("da_log")) {
    for (int64_t h = 0; h < H; ++h) outputs.at("da_log").set(h, da_log[h]);
  }
  if (outputs.contains("ddelta_time_bias")) {
    for (int64_t e = 0; e < H * K; ++e) outputs.at("ddelta_time_bias").set(e, ddtb[e]);
  }
}

namespace {

void run_reference(const KdaVjpProblem& problem, const TensorMap& inputs, TensorMap& outputs) {
  kimi_delta_attention_vjp_reference(problem, inputs, outputs);
}

}  // namespace

const Implementation& kimi_delta_attention_vjp_reference_implementation() {
  static const ReferenceImplementation<KdaVjpProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
