// Tests for the vectorized activations and the GLU combine against the scalar double definitions.
#include "ops/common/cpu_activation.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/activation.h"
#include "ops/framework/random.h"

using namespace tokamax;

namespace {

constexpr Activation kAll[] = {Activation::kNone,     Activation::kSilu,    Activation::kGelu,
                               Activation::kGeluTanh, Activation::kSigmoid, Activation::kRelu};

// Dense grid over [-12, 12] (past every saturation point), values near 0, and random ones.
std::vector<float> test_points() {
  std::vector<float> x;
  for (int i = -24000; i <= 24000; ++i) x.push_back(static_cast<float>(i) * 5e-4f);
  for (int e = -40; e <= 3; ++e) {
    x.push_back(std::ldexp(1.0f, e));
    x.push_back(-std::ldexp(1.0f, e));
  }
  for (uint64_t i = 0; i < 4000; ++i) x.push_back(static_cast<float>(normalish(11, 5, i) * 3.0));
  x.push_back(0.0f);
  x.push_back(-100.0f);
  x.push_back(100.0f);
  return x;
}

}  // namespace

TEST_CASE("cpu activations are within a few f32 ulps of the double definitions", "[glu]") {
  const std::vector<float> x = test_points();
  const double u = std::ldexp(1.0, -24);
  for (Activation activation : kAll) {
    CAPTURE(activation_name(activation));
    std::vector<float> y = x;
    cpu_activation_row(activation, y.data(), static_cast<int64_t>(y.size()));
    // Error in ulps of |x| + |act(x)|: the scale gelu's 1 + erf cancellation leaves (see
    // ops/common/cpu_activation.h); kActivationEvalUlps is what the error models grant.
    double worst = 0.0;
    float worst_x = 0.0f;
    for (size_t i = 0; i < x.size(); ++i) {
      const double expected = apply_activation<double>(activation, x[i]);
      const double scale = u * (std::fabs(static_cast<double>(x[i])) + std::fabs(expected)) +
                           std::numeric_limits<float>::denorm_min();
      const double ulps = std::fabs(y[i] - expected) / scale;
      REQUIRE(std::isfinite(y[i]));
      if (ulps > worst) {
        worst = ulps;
        worst_x = x[i];
      }
    }
    INFO("worst " << worst << " ulps at x = " << worst_x << " (target " << cpu::simd_target_name()
                  << ")");
    CHECK(worst <= kActivationEvalUlps / 2);
    // Exact where the definition is exact.
    std::vector<float> z = {0.0f, 1.0f, -1.0f};
    cpu_activation_row(activation, z.data(), 3);
    CHECK(z[0] == static_cast<float>(apply_activation<double>(activation, 0.0)));
  }
}

TEST_CASE("cpu sigmoid and silu saturate without overflow", "[glu]") {
  std::vector<float> x = {-1000.0f, -90.0f, 90.0f, 1000.0f};
  std::vector<float> s = x;
  cpu_activation_row(Activation::kSigmoid, s.data(), 4);
  CHECK(s[0] == 0.0f);
  CHECK(s[3] == 1.0f);
  std::vector<float> t = x;
  cpu_activation_row(Activation::kSilu, t.data(), 4);
  CHECK(t[0] == 0.0f);  // -1000 * 0, not -1000 * NaN
  CHECK(t[3] == 1000.0f);
}

TEST_CASE("cpu_glu_row is act(gate) * proj for every length, in place too", "[glu]") {
  for (Activation activation : kAll) {
    for (int64_t n = 0; n <= 53; ++n) {
      CAPTURE(activation_name(activation), n);
      std::vector<float> gate(n), proj(n), out(n + 1, -7.0f);
      for (int64_t i = 0; i < n; ++i) {
        gate[i] = static_cast<float>(normalish(1, 2, i) * 2);
        proj[i] = static_cast<float>(normalish(3, 4, i));
      }
      cpu_glu_row(activation, gate.data(), proj.data(), out.data(), n);
      CHECK(out[n] == -7.0f);  // nothing past n is written
      std::vector<float> act = gate;
      cpu_activation_row(activation, act.data(), n);
      std::vector<float> in_place = gate;
      cpu_glu_row(activation, in_place.data(), proj.data(), in_place.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        CHECK(out[i] == act[i] * proj[i]);
        CHECK(in_place[i] == out[i]);
      }
    }
  }
}

TEST_CASE("cpu_glu_vjp_row forms dout p act'(g) and dout act(g) within the error model's ulps",
          "[glu]") {
  const std::vector<float> x = test_points();
  const double u = std::ldexp(1.0, -24);
  for (Activation activation : kAll) {
    CAPTURE(activation_name(activation));
    // Every length's tail path: the last partial vector included.
    for (int64_t n : {static_cast<int64_t>(x.size()), int64_t{1}, int64_t{17}}) {
      std::vector<float> gate(x.begin(), x.begin() + n), proj(n, 1.0f), dout(n, 1.0f);
      cpu_glu_vjp_row(activation, dout.data(), gate.data(), proj.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        CAPTURE(x[i]);
        const double g = x[i];
        const double da = activation_derivative<double>(activation, g);
        const double a = apply_activation<double>(activation, g);
        // The error model's evaluation term for act' is c u (1 + |g|), for act c u (|g| + |a|).
        CHECK(std::fabs(gate[i] - da) <= kActivationEvalUlps * u * (1.0 + std::fabs(g)));
        CHECK(std::fabs(proj[i] - a) <=
              kActivationEvalUlps * u * (std::fabs(g) + std::fabs(a)) + 1e-45);
      }
    }
  }
}

TEST_CASE("cpu_biased_glu_row adds the biases before the activation, clamped forms as defined",
          "[glu]") {
  for (int64_t n = 0; n <= 53; ++n) {
    std::vector<float> gate(n), proj(n), gate_bias(n), proj_bias(n);
    for (int64_t i = 0; i < n; ++i) {
      // Past swigluoai's limit of 7 and silu_and_mul_with_clamp's of 10.
      gate[i] = static_cast<float>(normalish(1, 2, i) * 8);
      proj[i] = static_cast<float>(normalish(3, 4, i) * 8);
      gate_bias[i] = static_cast<float>(normalish(5, 6, i));
      proj_bias[i] = static_cast<float>(normalish(7, 8, i));
    }
    for (bool with_bias : {false, true}) {
      CAPTURE(n, with_bias);
      const float* gb = with_bias ? gate_bias.data() : nullptr;
      const float* pb = with_bias ? proj_bias.data() : nullptr;
      std::vector<float> g = gate, p = proj;  // the biased inputs, as the kernel adds them
      for (int64_t i = 0; with_bias && i < n; ++i) {
        g[i] += gate_bias[i];
        p[i] += proj_bias[i];
      }
      for (Activation activation : kAll) {
        CAPTURE(activation_name(activation));
        std::vector<float> act = g;
        cpu_activation_row(activation, act.data(), n);
        std::vector<float> out(n + 1, -7.0f), alone(n + 1, -7.0f);
        cpu_biased_glu_row(activation, GluForm{}, gate.data(), gb, proj.data(), pb, out.data(), n);
        cpu_biased_glu_row(activation, GluForm{}, gate.data(), gb, nullptr, nullptr, alone.data(),
                           n);
        CHECK(out[n] == -7.0f);  // nothing past n is written
        CHECK(alone[n] == -7.0f);
        for (int64_t i = 0; i < n; ++i) {
          CHECK(out[i] == act[i] * p[i]);
          CHECK(alone[i] == act[i]);
        }
      }
      // The clamped forms in place in gate, against the double definition on the same biased
      // inputs.
      for (const ClampedGlu* form : {&kSwigluOai, &kSiluClamped}) {
        CAPTURE(form->limit);
        std::vector<float> out = gate;
        cpu_biased_glu_row(Activation::kGelu, {.clamped = form}, out.data(), gb, proj.data(), pb,
                           out.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const double want = clamped_glu<double>(*form, g[i], p[i]);
          const double scale =
              std::abs(std::min<double>(g[i], form->limit)) *
              (std::min<double>(std::abs(p[i]), form->limit) + std::abs(form->up_offset));
          CHECK(std::abs(out[i] - want) <= 1e-6 * (1.0 + scale));
        }
      }
      // situ, with and without the soft cap on up (gate and up spread past both betas).
      for (const SituGlu situ : {SituGlu{4.0, 0.0}, SituGlu{2.5, 3.0}}) {
        CAPTURE(situ.beta, situ.linear_beta);
        std::vector<float> out(n);
        cpu_biased_glu_row(Activation::kRelu, {.situ = &situ}, gate.data(), gb, proj.data(), pb,
                           out.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const double want = situ_glu<double>(situ, g[i], p[i]);
          CHECK(std::abs(out[i] - want) <= 1e-6 * (1.0 + std::abs(g[i] * p[i])));
        }
      }
    }
  }
}

TEST_CASE("situ_glu soft-caps the gate's linear factor and up", "[glu]") {
  // Far past beta the gate factor tends to beta sigmoid(g); near 0, to silu's g sigmoid(g).
  const SituGlu form{4.0, 3.0};
  CHECK(situ_glu(form, 100.0, 1.0) == Approx(4.0 * 3.0 * std::tanh(1.0 / 3.0)));
  CHECK(situ_glu(form, 1e-3, 1e-3) == Approx(1e-3 * 0.5 * 1e-3).epsilon(1e-3));
  CHECK(situ_glu(SituGlu{4.0, 0.0}, 100.0, 50.0) == Approx(4.0 * 50.0));
}
