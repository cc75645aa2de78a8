// Tests of the chunked delta rule (ops/common/delta_rule_chunk.h) against the token-by-token rule
// in double, on every SIMD target: a chunk of 13 tokens with a decay per state row (one row
// decaying to e^-60 over the chunk), widths that take the vector loops and their tails; and
// its elementwise helpers against std::exp.
#include "ops/common/delta_rule_chunk.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "tests/simd_targets.h"

using namespace tokamax;
using namespace tokamax::testing;

TEST_CASE("delta_rule_chunk advances the state and outputs as token by token", "[delta_rule]") {
  const int64_t n = 13, K = 20, V = 37;
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> q(n * K), k(n * K), v(n * V), g(n * K), beta(n), S0(K * V);
  for (auto& x : q) x = 0.3 * normal(rng);
  for (auto& x : k) x = 0.3 * normal(rng);
  for (auto& x : v) x = normal(rng);
  for (int64_t t = 0; t < n; ++t) {
    beta[t] = uniform(rng);
    for (int64_t i = 0; i < K; ++i) g[t * K + i] = i == 3 ? -60.0 / n : -0.5 * uniform(rng);
  }
  for (auto& x : S0) x = 0.5 * normal(rng);
  // Token by token in double.
  std::vector<double> S = S0, out(n * V);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < K; ++i) {
      for (int64_t c = 0; c < V; ++c) S[i * V + c] *= std::exp(g[t * K + i]);
    }
    for (int64_t c = 0; c < V; ++c) {
      double pred = 0.0;
      for (int64_t i = 0; i < K; ++i) pred += k[t * K + i] * S[i * V + c];
      const double r = v[t * V + c] - pred;
      for (int64_t i = 0; i < K; ++i) S[i * V + c] += beta[t] * k[t * K + i] * r;
    }
    for (int64_t c = 0; c < V; ++c) {
      double o = 0.0;
      for (int64_t i = 0; i < K; ++i) o += q[t * K + i] * S[i * V + c];
      out[t * V + c] = o;
    }
  }
  // The chunk's operands (delta_rule_chunk.h), from the cumulative log decays b.
  std::vector<double> b(n * K);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < K; ++i) b[t * K + i] = (t ? b[(t - 1) * K + i] : 0.0) + g[t * K + i];
  }
  std::vector<float> A(n * n, 0.0f), P(n * n, 0.0f), kq(2 * n * K), kd(n * K), sd(K),
      uo(2 * n * V, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t s = 0; s <= t; ++s) {
      double a = 0.0, pq = 0.0;
      for (int64_t i = 0; i < K; ++i) {
        const double e = std::exp(b[t * K + i] - b[s * K + i]);
        a += k[t * K + i] * k[s * K + i] * e;
        pq += q[t * K + i] * k[s * K + i] * e;
      }
      if (s < t) A[t * n + s] = static_cast<float>(beta[t] * a);
      P[t * n + s] = static_cast<float>(pq);
    }
    for (int64_t i = 0; i < K; ++i) {
      const double e = std::exp(b[t * K + i]);
      kq[t * K + i] = static_cast<float>(-beta[t] * k[t * K + i] * e);
      kq[(n + t) * K + i] = static_cast<float>(q[t * K + i] * e);
      kd[t * K + i] =
          static_cast<float>(k[t * K + i] * std::exp(b[(n - 1) * K + i] - b[t * K + i]));
    }
    for (int64_t c = 0; c < V; ++c) uo[t * V + c] = static_cast<float>(beta[t] * v[t * V + c]);
  }
  for (int64_t i = 0; i < K; ++i) sd[i] = static_cast<float>(std::exp(b[(n - 1) * K + i]));
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    std::vector<float> state(S0.begin(), S0.end()), work = uo;
    delta_rule_chunk({.n = n,
                      .K = K,
                      .V = V,
                      .A = A.data(),
                      .P = P.data(),
                      .kq = kq.data(),
                      .kd = kd.data(),
                      .sd = sd.data(),
                      .uo = work.data()},
                     state.data());
    for (int64_t e = 0; e < K * V; ++e) CHECK(state[e] == Approx(S[e]).margin(2e-5));
    for (int64_t e = 0; e < n * V; ++e) CHECK(work[n * V + e] == Approx(out[e]).margin(2e-5));
  });
}

TEST_CASE("delta_rule elementwise helpers match std::exp on every target", "[delta_rule]") {
  const int64_t n = 37;  // vectors and a tail
  std::vector<float> x(n), hi(n), lo(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = 0.1f * static_cast<float>(i) - 1.5f;
    hi[i] = 0.5f * static_cast<float>(i % 7);
    lo[i] = -2.0f * static_cast<float>(i % 5);
  }
  for_each_forced_target({HWY_AVX3, HWY_AVX2, HWY_SCALAR}, [&](int64_t) {
    std::vector<float> e(n), y(n), z(n), w(n);
    for (int64_t i = 0; i < n; ++i) e[i] = -0.7f * static_cast<float>(i);
    delta_rule_exp(e.data(), n);
    delta_rule_scale_exp(x.data(), hi.data(), lo.data(), 2.0f, false, y.data(), n);
    delta_rule_scale_exp(x.data(), lo.data(), hi.data(), 2.0f, true, z.data(), n);
    delta_rule_scale(x.data(), -3.0f, w.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float t = -0.7f * static_cast<float>(i);
      CHECK(e[i] == Approx(t < -86.0f ? 0.0f : std::exp(t)).epsilon(1e-6).margin(1e-37));
      CHECK(y[i] == Approx(2.0f * x[i] * std::exp(lo[i] - hi[i])).epsilon(1e-6));
      CHECK(z[i] == Approx(2.0f * x[i] / std::exp(lo[i] - hi[i])).epsilon(1e-6));
      CHECK(w[i] == -3.0f * x[i]);
    }
  });
}
