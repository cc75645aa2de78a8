// triangle_multiplication: the portable reference, upstream's steps as plain f32 loops (every
// intermediate kept in f32), and its implementation.
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/reference_implementation.h"
#include "ops/triangle_multiplication/base.h"
#include "ops/triangle_multiplication/rows.h"

namespace tokamax {
namespace {

float sigmoidf(float v) { return 1.0f / (1.0f + std::exp(-v)); }

}  // namespace

void triangle_multiplication_reference(const TriangleMultiplicationProblem& p,
                                       const TensorMap& inputs, Tensor& out) {
  const int64_t N = p.N, C = p.C, H = p.H, D = p.D, P = p.positions();
  const Tensor& x = inputs.at("x");
  const bool* mask = inputs.at("mask").data<bool>();
  const TriangleWeightsF32 w = triangle_weights_f32(p, inputs);

  // a = layer_norm(x) [P, C]; v = sigmoid(a gate_in) (a projection_in) mask, as [2][H][P].
  std::vector<float> a(static_cast<size_t>(P * C)), v(static_cast<size_t>(2 * H * P));
  for (int64_t q = 0; q < P; ++q) {
    float* row = a.data() + q * C;
    for (int64_t c = 0; c < C; ++c) row[c] = static_cast<float>(x.get(q * C + c));
    layer_norm_row(row, C, w.in_scale.data(), w.in_offset.data(), static_cast<float>(p.epsilon));
    for (int64_t t = 0; t < 2 * H; ++t) {
      float g = 0.0f, pr = 0.0f;
      for (int64_t c = 0; c < C; ++c) {
        g += row[c] * w.gate_in[c * 2 * H + t];
        pr += row[c] * w.projection_in[c * 2 * H + t];
      }
      v[t * P + q] = mask[q] ? sigmoidf(g) * pr : 0.0f;
    }
  }
  const float* left = v.data();
  const float* right = v.data() + H * P;
  std::vector<float> act(static_cast<size_t>(H)), projected(static_cast<size_t>(D));
  dispatch_float(p.x_dtype, [&](auto type) {
    using T = decltype(type);
    T* dst = out.data<T>();
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        for (int64_t h = 0; h < H; ++h) {
          float sum = 0.0f;
          for (int64_t k = 0; k < N; ++k) {
            sum += p.outgoing ? left[h * P + i * N + k] * right[h * P + j * N + k]
                              : left[h * P + k * N + j] * right[h * P + k * N + i];
          }
          act[h] = sum;
        }
        layer_norm_row(act.data(), H, w.out_scale.data(), w.out_offset.data(),
                       static_cast<float>(p.epsilon));
        const float* a_row = a.data() + (i * N + j) * C;
        for (int64_t d = 0; d < D; ++d) {
          float o = 0.0f, g = 0.0f;
          for (int64_t h = 0; h < H; ++h) o += act[h] * w.projection_out[h * D + d];
          for (int64_t c = 0; c < C; ++c) g += a_row[c] * w.gate_out[c * D + d];
          dst[(i * N + j) * D + d] = from_double<T>(o * sigmoidf(g));
        }
      }
    }
  });
}

namespace {

void run_reference(const TriangleMultiplicationProblem& problem, const TensorMap& inputs,
                   TensorMap& outputs) {
  triangle_multiplication_reference(problem, inputs, outputs.at("out"));
}

}  // namespace

const Implementation& triangle_multiplication_reference_implementation() {
  static const ReferenceImplementation<TriangleMultiplicationProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
