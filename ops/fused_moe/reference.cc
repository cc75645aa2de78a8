// fused_moe: the portable reference, upstream's f32 computation as plain loops (a full softmax,
// a sort of each row's experts, f32 dot products route by route, quantized weights dequantized
// to f32 as they are read), and its implementation.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/reference_implementation.h"
#include "ops/fused_moe/base.h"

namespace tokamax {

void fused_moe_reference(const FusedMoeProblem& p, const Tensor& x, const Tensor& w1,
                         const Tensor& w2, const Tensor& gating, const Tensor* w1_bias,
                         const Tensor* w2_bias, const Tensor* w1_scale, const Tensor* w2_scale,
                         Tensor& out) {
  const int64_t N1 = 2 * p.I;
  std::vector<float> probs(static_cast<size_t>(p.E)), acc1(static_cast<size_t>(N1)),
      act(static_cast<size_t>(p.I)), acc(static_cast<size_t>(p.H));
  std::vector<int64_t> order(static_cast<size_t>(p.E));
  dispatch_float(p.x_dtype, [&](auto type) {
    using T = decltype(type);
    const T* xs = x.data<T>();
    T* dst = out.data<T>();
    for (int64_t t = 0; t < p.T; ++t) {
      // softmax over the row in f32, the experts ordered by logit (stable: ties to the lower).
      float top = -INFINITY;
      for (int64_t e = 0; e < p.E; ++e)
        top = std::max(top, static_cast<float>(gating.get(t * p.E + e)));
      float sum = 0.0f;
      for (int64_t e = 0; e < p.E; ++e) {
        probs[e] = std::exp(static_cast<float>(gating.get(t * p.E + e)) - top);
        sum += probs[e];
      }
      for (float& prob : probs) prob /= sum;
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t l, int64_t r) {
        return gating.get(t * p.E + l) > gating.get(t * p.E + r);
      });
      float selected = 0.0f;
      for (int64_t j = 0; j < p.k; ++j) selected += probs[order[j]];

      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < p.k; ++j) {
        const int64_t e = order[j];
        const float weight = p.renormalize ? probs[e] / selected : probs[e];
        for (int64_t n = 0; n < N1; ++n) {
          float s = 0.0f;
          for (int64_t h = 0; h < p.H; ++h)
            s += to_float(xs[t * p.H + h]) *
                 static_cast<float>(expert_weight(w1, w1_scale, p.w1_blocks, e, h, n));
          acc1[n] = s + (w1_bias ? static_cast<float>(w1_bias->get(e * N1 + n)) : 0.0f);
        }
        for (int64_t i = 0; i < p.I; ++i)
          act[i] = apply_moe_activation(p.act, acc1[i], acc1[p.I + i]);
        for (int64_t c = 0; c < p.H; ++c) {
          float s = 0.0f;
          for (int64_t i = 0; i < p.I; ++i)
            s += act[i] * static_cast<float>(expert_weight(w2, w2_scale, p.w2_blocks, e, i, c));
          s += w2_bias ? static_cast<float>(w2_bias->get(e * p.H + c)) : 0.0f;
          acc[c] += weight * s;
        }
      }
      for (int64_t c = 0; c < p.H; ++c) dst[t * p.H + c] = from_double<T>(acc[c]);
    }
  });
}

namespace {

void run_reference(const FusedMoeProblem& problem, const TensorMap& inputs, TensorMap& outputs) {
  fused_moe_reference(problem, inputs.at("x"), inputs.at("w1"), inputs.at("w2"),
                      inputs.at("gating"), find_tensor(inputs, "w1_bias"),
                      find_tensor(inputs, "w2_bias"), find_tensor(inputs, "w1_scale"),
                      find_tensor(inputs, "w2_scale"), outputs.at("out"));
}

}  // namespace

const Implementation& fused_moe_reference_implementation() {
  static const ReferenceImplementation<FusedMoeProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
