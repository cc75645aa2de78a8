// gated_linear_unit_vjp: the portable reference, templated on the accumulator (Acc = double is
// exact to the float64 oracle's rounding), and the "reference" implementation that runs it.
//
// Dimensions: as base.h.
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"
#include "ops/framework/vjp.h"
#include "ops/gated_linear_unit/api.h"
#include "ops/gated_linear_unit/vjp/base.h"

namespace tokamax {

template <typename Acc>
void gated_linear_unit_vjp_reference(const GluVjpProblem& vp, const Tensor& x, const GluWeights& w,
                                     const Tensor& dout, Tensor& dx, const GluWeightGrads& dw) {
  const GluProblem& p = vp.fwd;
  const int64_t M = p.M, K = p.K, N = p.N;
  std::vector<Acc> wt(static_cast<size_t>(K * 2 * N));  // [K, 2N] = [Wg | Wp]
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n) {
      wt[k * 2 * N + n] = static_cast<Acc>(w.get(0, k, n));
      wt[k * 2 * N + N + n] = static_cast<Acc>(w.get(1, k, n));
    }
  }
  std::vector<Acc> xr(static_cast<size_t>(K)), h(static_cast<size_t>(2 * N)),
      gp(static_cast<size_t>(2 * N)), dwt(static_cast<size_t>(K * 2 * N), Acc(0));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) xr[k] = static_cast<Acc>(x.get(m * K + k));
    std::fill(gp.begin(), gp.end(), Acc(0));
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t j = 0; j < 2 * N; ++j) gp[j] += xr[k] * wt[k * 2 * N + j];
    }
    for (int64_t n = 0; n < N; ++n) {
      const Acc d = static_cast<Acc>(dout.get(m * N + n));
      h[n] = d * gp[N + n] * activation_derivative<Acc>(p.activation, gp[n]);
      h[N + n] = d * apply_activation<Acc>(p.activation, gp[n]);
    }
    for (int64_t k = 0; k < K; ++k) {
      Acc sum = Acc(0);
      for (int64_t j = 0; j < 2 * N; ++j) sum += h[j] * wt[k * 2 * N + j];
      dx.set(m * K + k, static_cast<double>(sum));
      for (int64_t j = 0; j < 2 * N; ++j) dwt[k * 2 * N + j] += xr[k] * h[j];
    }
  }
  dispatch_float(dw.dtype, [&](auto w_type) {
    using W = decltype(w_type);
    W* gate = static_cast<W*>(dw.gate);
    W* proj = static_cast<W*>(dw.proj);
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t n = 0; n < N; ++n) {
        gate[k * dw.ld + n] = from_double<W>(static_cast<double>(dwt[k * 2 * N + n]));
        proj[k * dw.ld + n] = from_double<W>(static_cast<double>(dwt[k * 2 * N + N + n]));
      }
    }
  });
}

template void gated_linear_unit_vjp_reference<float>(const GluVjpProblem&, const Tensor&,
                                                     const GluWeights&, const Tensor&, Tensor&,
                                                     const GluWeightGrads&);
template void gated_linear_unit_vjp_reference<double>(const GluVjpProblem&, const Tensor&,
                                                      const GluWeights&, const Tensor&, Tensor&,
                                                      const GluWeightGrads&);

namespace {

void run_reference(const GluVjpProblem& problem, const TensorMap& inputs, TensorMap& outputs) {
  const GluWeights w = glu_weights(problem.fwd, inputs);
  const GluWeightGrads dw = glu_weight_grads(problem.fwd, outputs);
  if (problem.fwd.x_dtype == DType::kF64) {  // the accumulator of f64 inputs
    gated_linear_unit_vjp_reference<double>(problem, inputs.at("x"), w, inputs.at("dout"),
                                            outputs.at("dx"), dw);
  } else {
    gated_linear_unit_vjp_reference<float>(problem, inputs.at("x"), w, inputs.at("dout"),
                                           outputs.at("dx"), dw);
  }
}

}  // namespace

const Implementation& gated_linear_unit_vjp_reference_implementation() {
  static const ReferenceImplementation<GluVjpProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
