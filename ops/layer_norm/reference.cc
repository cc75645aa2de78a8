// layer_norm: the portable reference, templated on the accumulator (Acc = double is
// exact to the float64 oracle's rounding), and the "reference" implementation that runs it.
//
// Dimensions: as base.h.
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"
#include "ops/layer_norm/base.h"

namespace tokamax {

template <typename Acc>
void layer_norm_reference(const LayerNormProblem& p, const Tensor& x, const Tensor* scale,
                          const Tensor* offset, Tensor& out, LayerNormResiduals* residuals) {
  const int64_t O = p.O, C = p.C, I = p.I;
  if (residuals != nullptr) {
    residuals->mean.assign(static_cast<size_t>(p.rows()), 0.0);
    residuals->rstd.assign(static_cast<size_t>(p.rows()), 0.0);
  }
  if (C == 0) return;
  // Parameters in the accumulation type once (exact for f32/bf16/f16 parameters).
  std::vector<Acc> s(static_cast<size_t>(C)), b(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    s[c] = static_cast<Acc>(p.scale_at(scale, c));
    b[c] = static_cast<Acc>(LayerNormProblem::offset_at(offset, c));
  }
  const Acc eps = static_cast<Acc>(p.epsilon), inv_C = Acc(1) / static_cast<Acc>(C);
  dispatch_float(p.x_dtype, [&](auto x_type) {
    using X = decltype(x_type);
    const X* x_data = x.data<X>();
    X* out_data = out.data<X>();
    for (int64_t o = 0; o < O; ++o) {
      for (int64_t i = 0; i < I; ++i) {
        const X* xr = x_data + o * C * I + i;
        X* yr = out_data + o * C * I + i;
        Acc mean = Acc(0);
        if (p.subtract_mean) {
          for (int64_t c = 0; c < C; ++c) mean += static_cast<Acc>(to_double(xr[c * I]));
          mean *= inv_C;
        }
        Acc sq = Acc(0);
        for (int64_t c = 0; c < C; ++c) {
          const Acc d = static_cast<Acc>(to_double(xr[c * I])) - mean;
          sq += d * d;
        }
        const Acc rstd = Acc(1) / std::sqrt(sq * inv_C + eps);
        for (int64_t c = 0; c < C; ++c) {
          const Acc d = static_cast<Acc>(to_double(xr[c * I])) - mean;
          yr[c * I] = from_double<X>(static_cast<double>(d * rstd * s[c] + b[c]));
        }
        if (residuals != nullptr) {
          residuals->mean[o * I + i] = static_cast<double>(mean);
          residuals->rstd[o * I + i] = static_cast<double>(rstd);
        }
      }
    }
  });
}

template void layer_norm_reference<float>(const LayerNormProblem&, const Tensor&, const Tensor*,
                                          const Tensor*, Tensor&, LayerNormResiduals*);
template void layer_norm_reference<double>(const LayerNormProblem&, const Tensor&, const Tensor*,
                                           const Tensor*, Tensor&, LayerNormResiduals*);

namespace {

void run_reference(const LayerNormProblem& problem, const TensorMap& inputs, TensorMap& outputs) {
  const Tensor& x = inputs.at("x");
  const Tensor* scale = find_tensor(inputs, "scale");
  const Tensor* offset = find_tensor(inputs, "offset");
  Tensor& out = outputs.at("out");
  // Statistics in f32 (as upstream's reference), in f64 for f64 x.
  if (problem.x_dtype == DType::kF64) {
    layer_norm_reference<double>(problem, x, scale, offset, out);
  } else {
    layer_norm_reference<float>(problem, x, scale, offset, out);
  }
}

}  // namespace

const Implementation& layer_norm_reference_implementation() {
  static const ReferenceImplementation<LayerNormProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
