// linear_softmax_cross_entropy_loss_vjp: the portable reference, templated on the accumulator (Acc
// = double is exact to the float64 oracle's rounding), and the "reference" implementation that runs
// it.
//
// Dimensions: as base.h.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"
#include "ops/framework/vjp.h"
#include "ops/linear_softmax_cross_entropy_loss/api.h"
#include "ops/linear_softmax_cross_entropy_loss/oracle_logits.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp/base.h"

namespace tokamax {

template <typename Acc>
void linear_softmax_cross_entropy_vjp_reference(const LinearSoftmaxCrossEntropyVjpProblem& vp,
                                                const Tensor& x, const Tensor& labels,
                                                const Tensor& w, const Tensor& dloss, Tensor& dx,
                                                Tensor& dw) {
  const LinearSoftmaxCrossEntropyProblem& p = vp.fwd;
  const std::vector<double> c = lsce_vjp_row_weights(vp, labels, dloss);
  const int64_t B = p.B, H = p.H, V = p.V;
  const int32_t* label = labels.data<int32_t>();
  std::vector<Acc> z(static_cast<size_t>(V)), dw_acc(static_cast<size_t>(H * V), Acc(0));
  std::vector<Acc> w_acc(static_cast<size_t>(H * V)), x_row(static_cast<size_t>(H));
  for (int64_t i = 0; i < H * V; ++i) w_acc[i] = static_cast<Acc>(w.get(i));
  for (int64_t b = 0; b < B; ++b) {
    if (c[b] == 0.0) {  // padding (or a zero cotangent): a zero row of dx, nothing into dw
      for (int64_t h = 0; h < H; ++h) dx.set(b * H + h, 0.0);
      continue;
    }
    for (int64_t h = 0; h < H; ++h) x_row[h] = static_cast<Acc>(x.get(b * H + h));
    std::fill(z.begin(), z.end(), Acc(0));
    for (int64_t k = 0; k < H; ++k) {
      const Acc a = x_row[k];
      const Acc* w_row = w_acc.data() + k * V;
      for (int64_t j = 0; j < V; ++j) z[j] += a * w_row[j];
    }
    const Acc z_max = *std::max_element(z.begin(), z.end());
    Acc sum = Acc(0);
    for (int64_t j = 0; j < V; ++j) sum += std::exp(z[j] - z_max);
    const Acc lse = z_max + std::log(sum);
    // z becomes dz_b = c_b (p_b - onehot) in place.
    const Acc cb = static_cast<Acc>(c[b]);
    for (int64_t j = 0; j < V; ++j) z[j] = cb * std::exp(z[j] - lse);
    z[label[b]] -= cb;
    for (int64_t h = 0; h < H; ++h) {
      const Acc* w_row = w_acc.data() + h * V;
      Acc acc = Acc(0);
      for (int64_t j = 0; j < V; ++j) acc += z[j] * w_row[j];
      dx.set(b * H + h, static_cast<double>(acc));
      Acc* dw_row = dw_acc.data() + h * V;
      for (int64_t j = 0; j < V; ++j) dw_row[j] += x_row[h] * z[j];
    }
  }
  for (int64_t i = 0; i < H * V; ++i) dw.set(i, static_cast<double>(dw_acc[i]));
}

template void linear_softmax_cross_entropy_vjp_reference<float>(
    const LinearSoftmaxCrossEntropyVjpProblem&, const Tensor&, const Tensor&, const Tensor&,
    const Tensor&, Tensor&, Tensor&);
template void linear_softmax_cross_entropy_vjp_reference<double>(
    const LinearSoftmaxCrossEntropyVjpProblem&, const Tensor&, const Tensor&, const Tensor&,
    const Tensor&, Tensor&, Tensor&);

namespace {

void run_reference(const LinearSoftmaxCrossEntropyVjpProblem& p, const TensorMap& inputs,
                   TensorMap& outputs) {
  // f32 accumulation, as the forward's reference; f64 when an input is f64 (the kernels decline
  // those).
  const bool f64 = p.fwd.x_dtype == DType::kF64 || p.fwd.w_dtype == DType::kF64;
  if (f64) {
    linear_softmax_cross_entropy_vjp_reference<double>(p, inputs.at("x"), inputs.at("labels"),
                                                       inputs.at("w"), inputs.at("dloss"),
                                                       outputs.at("dx"), outputs.at("dw"));
  } else {
    linear_softmax_cross_entropy_vjp_reference<float>(p, inputs.at("x"), inputs.at("labels"),
                                                      inputs.at("w"), inputs.at("dloss"),
                                                      outputs.at("dx"), outputs.at("dw"));
  }
}

}  // namespace

const Implementation& linear_softmax_cross_entropy_loss_vjp_reference_implementation() {
  static const ReferenceImplementation<LinearSoftmaxCrossEntropyVjpProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
