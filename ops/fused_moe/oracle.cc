// fused_moe: the oracle in double from the inputs' stored values (Tensor::get), token by token:
// the routing, each route's hidden vector with its error magnitude, then the sampled columns.
//
// The magnitude carries the error an f32 implementation may make at each stage, in units of
// gamma (error_model): the gate and up products |g^ - g| <= gamma Mg, |p^ - p| <= gamma Mp and
// the activation through gated_product_magnitude (ops/common/activation.h); the down product
// sums |w2[i, c]| (m_i + |h_i|) (the hidden errors and its own accumulation); the weighted sum
// adds |w| |y| twice (the weight's own error and the sum's).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/fused_moe/base.h"

namespace tokamax {
namespace {

struct Route {
  int64_t expert = 0;
  double weight = 0.0;
  std::vector<double> hidden, magnitude;  // [I]: act(gate, up) and its error magnitude
};

// Token t's k routes in double.
std::vector<Route> token_routes(const FusedMoeProblem& p, const TensorMap& inputs, int64_t t,
                                double gamma, double n) {
  const Tensor& x = inputs.at("x");
  const Tensor& w1 = inputs.at("w1");
  const Tensor& gating = inputs.at("gating");
  const Tensor* bias = find_tensor(inputs, "w1_bias");
  const Tensor* w1_scale = find_tensor(inputs, "w1_scale");
  std::vector<int64_t> order(static_cast<size_t>(p.E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t l, int64_t r) {
    return gating.get(t * p.E + l) > gating.get(t * p.E + r);
  });
  const double top = gating.get(t * p.E + order[0]);
  double denominator = 0.0;
  for (int64_t j = 0; j < (p.renormalize ? p.k : p.E); ++j)
    denominator += std::exp(gating.get(t * p.E + order[j]) - top);

  const int64_t N1 = 2 * p.I;
  const ClampedGlu* clamped = moe_clamped_form(p.act);
  const double L = activation_lipschitz(Activation::kSilu);  // of g sigmoid(alpha g), any alpha
  std::vector<double> value(static_cast<size_t>(N1)), mag(static_cast<size_t>(N1));
  std::vector<Route> routes(static_cast<size_t>(p.k));
  for (int64_t j = 0; j < p.k; ++j) {
    Route& route = routes[j];
    route.expert = order[j];
    route.weight = std::exp(gating.get(t * p.E + order[j]) - top) / denominator;
    for (int64_t c = 0; c < N1; ++c) {
      const double b = bias ? bias->get(route.expert * N1 + c) : 0.0;
      value[c] = b;
      mag[c] = std::fabs(b);
    }
    for (int64_t h = 0; h < p.H; ++h) {
      const double xv = x.get(t * p.H + h);
      if (xv == 0.0) continue;
      for (int64_t c = 0; c < N1; ++c) {
        const double term = xv * expert_weight(w1, w1_scale, p.w1_blocks, route.expert, h, c);
        value[c] += term;
        mag[c] += std::fabs(term);
      }
    }
    route.hidden.resize(static_cast<size_t>(p.I));
    route.magnitude.resize(static_cast<size_t>(p.I));
    for (int64_t i = 0; i < p.I; ++i) {
      double g = value[i], u = value[p.I + i];
      if (clamped) {  // the clamps are 1-Lipschitz: the magnitudes carry over
        g = std::min(g, clamped->limit);
        u = std::clamp(u, -clamped->limit, clamped->limit) + clamped->up_offset;
      }
      const double alpha = clamped ? clamped->alpha : 1.0;
      const double a = g * sigmoid(alpha * g);
      route.hidden[i] = a * u;
      route.magnitude[i] = gated_product_magnitude(g, a, u, mag[i], mag[p.I + i], L, gamma, n);
    }
  }
  return routes;
}

}  // namespace

template <>
OracleSample ProblemOp<FusedMoeProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                                std::string_view output,
                                                std::span<const int64_t> index) const {
  if (output != "out") {
    throw InvalidArgument("fused_moe has no output '" + std::string(output) + "'");
  }
  const FusedMoeProblem p = FusedMoeProblem::from(args);
  const Tensor& w2 = inputs.at("w2");
  const Tensor* bias = find_tensor(inputs, "w2_bias");
  const Tensor* w2_scale = find_tensor(inputs, "w2_scale");
  const ErrorModel model = error_model(args);
  const double n = model.accumulation_length;
  const double nu = n * model.accumulation_roundoff;
  const double gamma = nu / (1.0 - nu);
  // The output's subnormal spacing as an absolute floor, in magnitude units (f16 rounds values
  // below 6.1e-5 to multiples of 2^-24).
  const double floor_term = subnormal_floor(p.x_dtype) / gamma;
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.resize(index.size());
  sample.magnitude.resize(index.size());
  int64_t cached_token = -1;
  std::vector<Route> routes;
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t t = index[s] / p.H, c = index[s] % p.H;
    if (t != cached_token) {
      routes = token_routes(p, inputs, t, gamma, n);
      cached_token = t;
    }
    double sum = 0.0, magnitude = 0.0;
    for (const Route& route : routes) {
      const double b = bias ? bias->get(route.expert * p.H + c) : 0.0;
      double y = b, y_mag = std::fabs(b);
      for (int64_t i = 0; i < p.I; ++i) {
        const double w = expert_weight(w2, w2_scale, p.w2_blocks, route.expert, i, c);
        y += route.hidden[i] * w;
        y_mag += std::fabs(w) * (route.magnitude[i] + std::fabs(route.hidden[i]));
      }
      sum += route.weight * y;
      magnitude += route.weight * (y_mag + 2.0 * std::fabs(y));
    }
    sample.value[s] = sum;
    sample.magnitude[s] = magnitude + floor_term;
  }
  return sample;
}

}  // namespace tokamax
