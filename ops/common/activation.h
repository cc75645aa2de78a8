// Activation functions shared by the ops (gated_linear_unit today, MLPs later): the names the
// catalogs use, and a scalar definition that the references (at double) and the kernels' scalar
// tails (at float) share. Vectorized forms are in ops/common/cpu_activation.h.
#pragma once

#include <cmath>
#include <numbers>
#include <string_view>

namespace tokamax {

enum class Activation { kNone, kSilu, kGelu, kGeluTanh, kSigmoid, kRelu };

// "none", "silu", "gelu" (exact, erf), "gelu_tanh" (tanh approximation), "sigmoid", "relu".
std::string_view activation_name(Activation activation);
// Throws InvalidArgument listing the accepted names.
Activation parse_activation(std::string_view name);

template <typename T>
T sigmoid(T x) {
  // 1 / (1 + e^-x) overflows e^-x for very negative x to inf, which still gives the right 0.
  return T(1) / (T(1) + std::exp(-x));
}

template <typename T>
T apply_activation(Activation activation, T x) {
  switch (activation) {
    case Activation::kNone:
      return x;
    case Activation::kSilu:
      return x * sigmoid(x);
    case Activation::kGelu:
      return T(0.5) * x * (T(1) + std::erf(x * T(std::numbers::sqrt2 / 2)));
    case Activation::kGeluTanh: {
      const T c = T(0.7978845608028654);  // sqrt(2 / pi)
      return T(0.5) * x * (T(1) + std::tanh(c * (x + T(0.044715) * x * x * x)));
    }
    case Activation::kSigmoid:
      return sigmoid(x);
    case Activation::kRelu:
      return x > T(0) ? x : T(0);
  }
  return x;
}

// d act / dx at x: the gradients' (gated_linear_unit_vjp). relu's derivative at 0 is 0, as
// jax.nn.relu's; gelu_tanh's is the derivative of its tanh formula, not of the exact gelu.
template <typename T>
T activation_derivative(Activation activation, T x) {
  switch (activation) {
    case Activation::kNone:
      return T(1);
    case Activation::kSilu: {
      const T s = sigmoid(x);
      return s * (T(1) + x * (T(1) - s));
    }
    case Activation::kGelu: {
      const T cdf = T(0.5) * (T(1) + std::erf(x * T(std::numbers::sqrt2 / 2)));
      const T pdf = T(0.3989422804014327) * std::exp(T(-0.5) * x * x);  // 1 / sqrt(2 pi)
      return cdf + x * pdf;
    }
    case Activation::kGeluTanh: {
      const T c = T(0.7978845608028654), b = T(0.044715);
      const T t = std::tanh(c * (x + b * x * x * x));
      return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3) * b * x * x);
    }
    case Activation::kSigmoid: {
      const T s = sigmoid(x);
      return s * (T(1) - s);
    }
    case Activation::kRelu:
      return x > T(0) ? T(1) : T(0);
  }
  return T(1);
}

// How far an f32 evaluation of an activation may be from the exact one, in units of the f32
// roundoff times (|x| + |act(x)|): a few ulps of erf/exp/tanh, and the cancellation in
// 1 + erf(x) that makes gelu's absolute error scale with |x| (ops/common/cpu_activation.h).
inline constexpr double kActivationEvalUlps = 8.0;

// A clamped gated combine (upstream's gmm_v2 forms): the gate clamped above at `limit`, up
// clamped to [-limit, limit] and offset, then (up + up_offset) * gate * sigmoid(alpha * gate).
// A NaN gate gives the limit (the comparisons' way), a NaN up stays NaN.
struct ClampedGlu {
  double alpha = 1.0, limit = 0.0, up_offset = 0.0;
};
// gpt-oss's "swigluoai".
inline constexpr ClampedGlu kSwigluOai{.alpha = 1.702, .limit = 7.0, .up_offset = 1.0};
// DeepSeek-V4's "silu_and_mul_with_clamp": silu(min(gate, 10)) * clamp(up, -10, 10).
inline constexpr ClampedGlu kSiluClamped{.alpha = 1.0, .limit = 10.0, .up_offset = 0.0};
template <typename T>
T clamped_glu(const ClampedGlu& form, T gate, T up) {
  const T limit = T(form.limit);
  const T g = gate < limit ? gate : limit;
  const T u = up < -limit ? -limit : (up > limit ? limit : up);
  return (u + T(form.up_offset)) * (g * sigmoid(T(form.alpha) * g));
}

// upstream's gmm_v2 "situ:<beta>:<linear_beta>": silu with its linear factor soft-capped,
// beta tanh(gate / beta) sigmoid(gate), times up soft-capped to linear_beta tanh(up /
// linear_beta) (linear_beta 0: up as it is). beta, linear_beta > 0.
struct SituGlu {
  double beta = 1.0, linear_beta = 0.0;
};
template <typename T>
T situ_glu(const SituGlu& form, T gate, T up) {
  const T a = T(form.beta) * std::tanh(gate / T(form.beta)) * sigmoid(gate);
  const T u =
      form.linear_beta > 0.0 ? T(form.linear_beta) * std::tanh(up / T(form.linear_beta)) : up;
  return a * u;
}
// |d/dg beta tanh(g / beta) sigmoid(g)| <= sech^2 sigmoid + |g| sigmoid (1 - sigmoid) <= 1 +
// max |g| sigmoid'(g) (0.224, at |g| ~ 1.54), rounded up.
inline constexpr double kSituLipschitz = 1.25;

// How act(gate) and up combine where a gated product is fused (cpu_biased_glu_row): act(gate) *
// up, or one of the forms above (at most one set; the activation is then theirs).
struct GluForm {
  const ClampedGlu* clamped = nullptr;
  const SituGlu* situ = nullptr;
};

// The error magnitude of a gated product a * p, a = act(g), with the gate g and the projection
// p each a contraction computed to |g^ - g| <= gamma Mg, |p^ - p| <= gamma Mp (gamma = n u /
// (1 - n u), u the accumulator's roundoff), act evaluated within kActivationEvalUlps of |g| +
// |a| and Lipschitz L, and one more rounding of the product (derivation in
// ops/gated_linear_unit/oracle.cc):
//   |a^ p^ - a p| <= gamma * gated_product_magnitude(...) (+ the output rounding),
// with a 1% margin for the second-order terms.
inline double gated_product_magnitude(double g, double a, double p, double Mg, double Mp, double L,
                                      double gamma, double n) {
  const double proj_bound = std::fabs(p) + gamma * Mp;
  const double contraction = L * Mg * proj_bound + std::fabs(a) * Mp;
  const double evaluation =
      (kActivationEvalUlps * (std::fabs(g) + std::fabs(a) + (1.0 + L) * gamma * Mg) + std::fabs(a) +
       L * gamma * Mg) *
      proj_bound / n;
  return 1.01 * (contraction + evaluation);
}

// |d act / dx| bounded over all x: how much an input error of e can grow through the
// activation (for error models). relu/none: 1; silu: ~1.1; gelu: ~1.13; sigmoid: 1/4.
double activation_lipschitz(Activation activation);
// |d^2 act / dx^2| bounded over all x: how much an input error of e can move the derivative
// (for the gradients' error models). none/relu: 0 (relu's derivative jumps at 0 instead: a
// gradient error model adds that step where the input's error bound covers 0); silu: 1/2 (at
// 0); gelu: 2 / sqrt(2 pi) ~ 0.798 (at 0); gelu_tanh: ~0.80; sigmoid: 1 / (6 sqrt 3) ~ 0.0962.
double activation_curvature(Activation activation);

}  // namespace tokamax
