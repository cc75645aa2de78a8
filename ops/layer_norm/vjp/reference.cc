// layer_norm_vjp: the portable reference (templated on the accumulation type; double is the
// float64 oracle of every output) and the "reference" implementation that runs it.
//
// Dimensions.
//   C      x's extent along `axis`: the normalized extent (the length of scale and offset)
//   O      product of x's extents before `axis`
//   I      product of x's extents after `axis`; I = 1 for the last axis
#include <cmath>
#include <vector>

#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/reference_implementation.h"
#include "ops/layer_norm/vjp/base.h"

namespace tokamax {
template <typename Acc>
void layer_norm_vjp_reference(const LayerNormVjpProblem& p, const Tensor& x, const Tensor* scale,
                              const Tensor* /*offset*/, const Tensor& dout, Tensor& dx,
                              Tensor* dscale, Tensor* doffset) {
  const int64_t O = p.O, C = p.C, I = p.I;
  std::vector<Acc> ds(static_cast<size_t>(C), Acc(0)), db(static_cast<size_t>(C), Acc(0));
  if (C > 0) {
    std::vector<Acc> s(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      s[c] = static_cast<Acc>(p.scale_at(scale, c));
    }
    const Acc eps = static_cast<Acc>(p.epsilon), inv_C = Acc(1) / static_cast<Acc>(C);
    dispatch_float(p.x_dtype, [&](auto x_type) {
      using X = decltype(x_type);
      const X* x_data = x.data<X>();
      const X* dy_data = dout.data<X>();
      X* dx_data = dx.data<X>();
      for (int64_t o = 0; o < O; ++o) {
        for (int64_t i = 0; i < I; ++i) {
          const int64_t base = o * C * I + i;
          auto xv = [&](int64_t c) { return static_cast<Acc>(to_double(x_data[base + c * I])); };
          auto dy = [&](int64_t c) { return static_cast<Acc>(to_double(dy_data[base + c * I])); };
          Acc mean = Acc(0);
          if (p.subtract_mean) {
            for (int64_t c = 0; c < C; ++c) mean += xv(c);
            mean *= inv_C;
          }
          Acc sq = Acc(0);
          for (int64_t c = 0; c < C; ++c) sq += (xv(c) - mean) * (xv(c) - mean);
          const Acc rstd = Acc(1) / std::sqrt(sq * inv_C + eps);
          Acc sum_g = Acc(0), sum_gx = Acc(0);
          for (int64_t c = 0; c < C; ++c) {
            const Acc g = dy(c) * s[c];
            sum_g += g;
            sum_gx += g * ((xv(c) - mean) * rstd);
          }
          const Acc gbar = p.subtract_mean ? sum_g * inv_C : Acc(0), h = sum_gx * inv_C;
          for (int64_t c = 0; c < C; ++c) {
            const Acc xhat = (xv(c) - mean) * rstd;
            const Acc g = dy(c) * s[c];
            dx_data[base + c * I] =
                from_double<X>(static_cast<double>(rstd * (g - gbar - xhat * h)));
            ds[c] += dy(c) * xhat;
            db[c] += dy(c);
          }
        }
      }
    });
  }
  for (int64_t c = 0; c < C; ++c) {
    if (dscale != nullptr) dscale->set(c, static_cast<double>(ds[c]));
    if (doffset != nullptr) doffset->set(c, static_cast<double>(db[c]));
  }
}

template void layer_norm_vjp_reference<float>(const LayerNormVjpProblem&, const Tensor&,
                                              const Tensor*, const Tensor*, const Tensor&, Tensor&,
                                              Tensor*, Tensor*);
template void layer_norm_vjp_reference<double>(const LayerNormVjpProblem&, const Tensor&,
                                               const Tensor*, const Tensor*, const Tensor&, Tensor&,
                                               Tensor*, Tensor*);

namespace {

Tensor* find_output(TensorMap& outputs, const char* name) {
  auto it = outputs.find(name);
  return it == outputs.end() ? nullptr : &it->second;
}

void run_reference(const LayerNormVjpProblem& problem, const TensorMap& inputs,
                   TensorMap& outputs) {
  const Tensor& x = inputs.at("x");
  const Tensor& dout = inputs.at("dout");
  const Tensor* scale = find_tensor(inputs, "scale");
  const Tensor* offset = find_tensor(inputs, "offset");
  Tensor& dx = outputs.at("dx");
  Tensor* dscale = find_output(outputs, "dscale");
  Tensor* doffset = find_output(outputs, "doffset");
  // f32 accumulation (as the forward's reference), f64 for f64 x.
  if (problem.x_dtype == DType::kF64) {
    layer_norm_vjp_reference<double>(problem, x, scale, offset, dout, dx, dscale, doffset);
  } else {
    layer_norm_vjp_reference<float>(problem, x, scale, offset, dout, dx, dscale, doffset);
  }
}

}  // namespace

const Implementation& layer_norm_vjp_reference_implementation() {
  static const ReferenceImplementation<LayerNormVjpProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
