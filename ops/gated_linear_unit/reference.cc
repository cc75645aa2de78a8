// gated_linear_unit: the portable reference, templated on the accumulator (Acc = double is
// exact to the float64 oracle's rounding), and the "reference" implementation that runs it.
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
#include "ops/gated_linear_unit/base.h"

namespace tokamax {

template <typename Acc>
void gated_linear_unit_reference(const GluProblem& p, const Tensor& x, const GluWeights& weights,
                                 Tensor& out) {
  const int64_t M = p.M, K = p.K, N = p.N;
  std::vector<Acc> gate(static_cast<size_t>(N)), proj(static_cast<size_t>(N));
  dispatch_float(p.x_dtype, [&](auto x_type) {
    using X = decltype(x_type);
    dispatch_float(p.w_dtype, [&](auto w_type) {
      using W = decltype(w_type);
      const X* x_data = x.data<X>();
      const W* gate_data = static_cast<const W*>(weights.gate);
      const W* proj_data = static_cast<const W*>(weights.proj);
      dispatch_float(p.out_dtype(), [&](auto out_type) {
        using O = decltype(out_type);
        O* out_data = out.data<O>();
        for (int64_t row = 0; row < M; ++row) {
          std::fill(gate.begin(), gate.end(), Acc(0));
          std::fill(proj.begin(), proj.end(), Acc(0));
          // k-outer, n-inner: weight rows are contiguous, and every output still sums its K terms
          // in order k = 0..K-1.
          for (int64_t k = 0; k < K; ++k) {
            const Acc xk = static_cast<Acc>(to_double(x_data[row * K + k]));
            const W* w_gate = gate_data + k * weights.ld;
            const W* w_proj = proj_data + k * weights.ld;
            for (int64_t n = 0; n < N; ++n) {
              gate[n] += xk * static_cast<Acc>(to_double(w_gate[n]));
              proj[n] += xk * static_cast<Acc>(to_double(w_proj[n]));
            }
          }
          for (int64_t n = 0; n < N; ++n) {
            const Acc a = apply_activation<Acc>(p.activation, gate[n]);
            out_data[row * N + n] = from_double<O>(static_cast<double>(a * proj[n]));
          }
        }
      });
    });
  });
}

template void gated_linear_unit_reference<float>(const GluProblem&, const Tensor&,
                                                 const GluWeights&, Tensor&);
template void gated_linear_unit_reference<double>(const GluProblem&, const Tensor&,
                                                  const GluWeights&, Tensor&);

namespace {

void run_reference(const GluProblem& given, const TensorMap& given_inputs, TensorMap& outputs) {
  // A precision preset: the portable product of the expanded pieces (precision.h).
  const GluProblem problem = given.computed();
  const TensorMap inputs = expand_glu_precision_operands(given, given_inputs);
  Tensor& out = outputs.at("out");
  // f64 outputs accumulate in f64; everything else in f32, as upstream's reference does.
  const GluWeights weights = glu_weights(problem, inputs);
  if (problem.out_dtype() == DType::kF64) {
    gated_linear_unit_reference<double>(problem, inputs.at("x"), weights, out);
  } else {
    gated_linear_unit_reference<float>(problem, inputs.at("x"), weights, out);
  }
}

}  // namespace

const Implementation& gated_linear_unit_reference_implementation() {
  static const ReferenceImplementation<GluProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
