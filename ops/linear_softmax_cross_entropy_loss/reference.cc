// linear_softmax_cross_entropy_loss: the portable reference, templated on the accumulator (Acc =
// double is exact to the float64 oracle's rounding), and the "reference" implementation that runs
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
#include "ops/linear_softmax_cross_entropy_loss/base.h"

namespace tokamax {

template <typename Acc>
void linear_softmax_cross_entropy_reference(const LinearSoftmaxCrossEntropyProblem& p,
                                            const Tensor& x, const Tensor& labels, const Tensor& w,
                                            Tensor& loss, Tensor* lse) {
  check_lsce_labels(p, labels);
  const int64_t B = p.B, H = p.H, V = p.V;
  const int32_t* label = labels.data<int32_t>();
  float* out = loss.data<float>();
  float* lse_out = lse != nullptr ? lse->data<float>() : nullptr;
  std::vector<Acc> z(static_cast<size_t>(V));
  Acc total = Acc(0);
  dispatch_float(p.x_dtype, [&](auto x_type) {
    using X = decltype(x_type);
    dispatch_float(p.w_dtype, [&](auto w_type) {
      using W = decltype(w_type);
      const X* x_data = x.data<X>();
      const W* w_data = w.data<W>();
      for (int64_t i = 0; i < B; ++i) {
        const bool counts = lsce_label_counts(label[i], V);
        if (!counts) {  // padding: zero loss, still counted in the mean
          if (p.reduction == LsceReduction::kNone) out[i] = 0.0f;
          if (lse_out == nullptr) continue;  // its logits only matter for lse
        }
        std::fill(z.begin(), z.end(), Acc(0));
        // k-outer, j-inner: w rows are contiguous and each logit still sums its H terms in
        // order k = 0..H-1, as the error model assumes.
        for (int64_t k = 0; k < H; ++k) {
          const Acc a = static_cast<Acc>(to_double(x_data[i * H + k]));
          const W* w_row = w_data + k * V;
          for (int64_t j = 0; j < V; ++j) z[j] += a * static_cast<Acc>(to_double(w_row[j]));
        }
        const Acc z_max = *std::max_element(z.begin(), z.end());
        Acc sum = Acc(0);
        for (int64_t j = 0; j < V; ++j) sum += std::exp(z[j] - z_max);
        const Acc row_lse = z_max + std::log(sum);
        if (lse_out != nullptr) lse_out[i] = static_cast<float>(row_lse);
        if (!counts) continue;
        const Acc row_loss = row_lse - z[label[i]];
        if (p.reduction == LsceReduction::kNone) {
          out[i] = static_cast<float>(row_loss);
        } else {
          total += row_loss;
        }
      }
    });
  });
  if (p.reduction == LsceReduction::kSum) out[0] = static_cast<float>(total);
  if (p.reduction == LsceReduction::kMean) {
    out[0] = static_cast<float>(total / static_cast<Acc>(std::max<int64_t>(B, 1)));
  }
}

template void linear_softmax_cross_entropy_reference<float>(const LinearSoftmaxCrossEntropyProblem&,
                                                            const Tensor&, const Tensor&,
                                                            const Tensor&, Tensor&, Tensor*);
template void linear_softmax_cross_entropy_reference<double>(
    const LinearSoftmaxCrossEntropyProblem&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
    Tensor*);

namespace {

void run_reference(const LinearSoftmaxCrossEntropyProblem& given, const TensorMap& given_inputs,
                   TensorMap& outputs) {
  // A precision preset: the portable product of the expanded pieces (precision.h).
  const LinearSoftmaxCrossEntropyProblem p = given.computed();
  const TensorMap inputs = expand_lsce_precision_operands(given, given_inputs);
  // f32 accumulation, as upstream's XLA reference computes the logits and the softmax in f32.
  linear_softmax_cross_entropy_reference<float>(p, inputs.at("x"), inputs.at("labels"),
                                                inputs.at("w"), outputs.at("loss"),
                                                p.return_residuals ? &outputs.at("lse") : nullptr);
}

}  // namespace

const Implementation& linear_softmax_cross_entropy_loss_reference_implementation() {
  static const ReferenceImplementation<LinearSoftmaxCrossEntropyProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
