// triangle_multiplication: the oneDNN baseline ("onednn"), the layer as a oneDNN user composes
// it: our loops for the norms, the gating and the layout changes, oneDNN f32 matmuls for every
// product (the input projections as one [P, C] x [C, 4H + D] matmul, the triangle product as
// one matmul batched over H with the transposed plane given as strides, the output projection).
// f32 matmuls for every input dtype: oneDNN 2.6's bf16 matmul runs at half their rate on CPUs
// without avx512_bf16, and the baseline should be the faster of the two.
//
// Dimensions: as base.h.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/onednn_engine.h"
#include "backends/cpu/thread_pool.h"
#include "ops/common/cpu_activation.h"
#include "ops/common/cpu_gemm/pack.h"
#include "ops/common/onednn_primitive.h"
#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/errors.h"
#include "ops/triangle_multiplication/base.h"
#include "ops/triangle_multiplication/onednn_matmul.h"
#include "ops/triangle_multiplication/rows.h"

namespace tokamax {
namespace {

using dt = dnnl::memory::data_type;
using Dims = dnnl::memory::dims;

class OneDnnTriangleMultiplication final
    : public OneDnnImplementation<TriangleMultiplicationProblem> {
 public:
  nlohmann::json describe() const override {
    nlohmann::json description = cpu::onednn_describe();
    description["composite"] =
        "tokamax norms, gating and layout loops around oneDNN f32 matmuls (input projections, "
        "the triangle product batched over H, output projection)";
    return description;
  }

  void check(const TriangleMultiplicationProblem&, const Device&) const override {
    const std::string why = cpu::onednn_matmul_unavailable(dt::f32);
    if (!why.empty()) throw NotImplemented("onednn: f32 matmul: " + why);
  }

  void run(const TriangleMultiplicationProblem& p, const EmptyConfig&, const Device& device,
           const TensorMap& inputs, TensorMap& outputs) const override {
    check(p, device);
    const int64_t N = p.N, C = p.C, H = p.H, D = p.D, P = p.positions(), W = 4 * H + D;
    const float epsilon = static_cast<float>(p.epsilon);
    TriangleWeightsF32 w = triangle_weights_f32(p, inputs);  // non-const: oneDNN takes float*
    const bool* mask = inputs.at("mask").data<bool>();
    constexpr int64_t kRows = 64;

    // a = layer_norm(x) [P, C].
    std::vector<float> a(static_cast<size_t>(P * C));
    dispatch_float(p.x_dtype, [&](auto type) {
      using T = decltype(type);
      const T* x = inputs.at("x").data<T>();
      cpu::parallel_for((P + kRows - 1) / kRows, 0, [&](int64_t task, int) {
        for (int64_t q = task * kRows; q < std::min(P, (task + 1) * kRows); ++q) {
          for (int64_t c = 0; c < C; ++c) a[q * C + c] = to_float(x[q * C + c]);
          layer_norm_row(a.data() + q * C, C, w.in_scale.data(), w.in_offset.data(), epsilon);
        }
      });
    });
    // y = a [gate_in | projection_in | gate_out] [P, W].
    std::vector<float> y(static_cast<size_t>(P * W));
    matmul_.run({{P, C}, {C, 1}, {C, W}, {W, 1}, {P, W}, {W, 1}}, a.data(), w.w_in.data(),
                y.data());
    // v = sigmoid(g) p mask into planes [2][H][P]; the gates sigmoid(a gate_out) in place.
    std::vector<float> planes(static_cast<size_t>(2 * H * P));
    cpu::parallel_for((P + kRows - 1) / kRows, 0, [&](int64_t task, int) {
      const int64_t q0 = task * kRows, q1 = std::min(P, q0 + kRows);
      for (int64_t q = q0; q < q1; ++q) {
        float* row = y.data() + q * W;
        cpu_glu_row(Activation::kSigmoid, row, row + 2 * H, row, 2 * H);
        if (!mask[q]) std::fill_n(row, 2 * H, 0.0f);
        cpu_activation_row(Activation::kSigmoid, row + 4 * H, D);
      }
      for (int64_t t = 0; t < 2 * H; ++t) {
        for (int64_t q = q0; q < q1; ++q) planes[t * P + q] = y[q * W + t];
      }
    });
    // act [H][N][N]: outgoing L R^T, incoming R^T L, batched over H; the transposed plane by
    // strides.
    std::vector<float> act(static_cast<size_t>(H * P));
    float* L = planes.data();
    float* R = planes.data() + H * P;
    const Dims plain = {P, N, 1}, transposed = {P, 1, N};
    if (p.outgoing) {
      matmul_.run({{H, N, N}, plain, {H, N, N}, transposed, {H, N, N}, plain}, L, R, act.data());
    } else {
      matmul_.run({{H, N, N}, transposed, {H, N, N}, plain, {H, N, N}, plain}, R, L, act.data());
    }
    // b = layer_norm(act over H) [P, H]; z = b projection_out [P, D]; out = z gates.
    std::vector<float> b(static_cast<size_t>(P * H));
    cpu::parallel_for((P + kRows - 1) / kRows, 0, [&](int64_t task, int) {
      const int64_t q0 = task * kRows, q1 = std::min(P, q0 + kRows);
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t q = q0; q < q1; ++q) b[q * H + h] = act[h * P + q];
      }
      for (int64_t q = q0; q < q1; ++q) {
        layer_norm_row(b.data() + q * H, H, w.out_scale.data(), w.out_offset.data(), epsilon);
      }
    });
    std::vector<float> z(static_cast<size_t>(P * D));
    matmul_.run({{P, H}, {H, 1}, {H, D}, {D, 1}, {P, D}, {D, 1}}, b.data(), w.projection_out.data(),
                z.data());
    char* out = static_cast<char*>(outputs.at("out").raw());
    const size_t out_size = dtype_size(p.x_dtype);
    cpu::parallel_for((P + kRows - 1) / kRows, 0, [&](int64_t task, int) {
      const int64_t q0 = task * kRows, q1 = std::min(P, q0 + kRows);
      for (int64_t q = q0; q < q1; ++q) {
        for (int64_t d = 0; d < D; ++d) z[q * D + d] *= y[q * W + 4 * H + d];
      }
      store_rows(z.data() + q0 * D, D, q1 - q0, D, p.x_dtype, out + q0 * D * out_size, D);
    });
  }

 private:
  TriangleMatmuls matmul_;
};

}  // namespace

const Implementation& triangle_multiplication_onednn_implementation() {
  static const OneDnnTriangleMultiplication impl;
  return impl;
}

}  // namespace tokamax
