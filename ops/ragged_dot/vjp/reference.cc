// ragged_dot_vjp: the portable reference, templated on the accumulator (Acc = double is
// exact to the float64 oracle's rounding), and the "reference" implementation that runs it.
//
// Dimensions: as base.h.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"
#include "ops/framework/vjp.h"
#include "ops/ragged_dot/api.h"
#include "ops/ragged_dot/vjp/base.h"
#include "ops/ragged_dot/vjp/precision.h"

namespace tokamax {

template <typename Acc>
void ragged_dot_vjp_reference(const RaggedDotVjpProblem& vp, const Tensor& lhs, const Tensor& rhs,
                              const Tensor& dout, Tensor& dlhs, Tensor& drhs) {
  const RaggedDotProblem& p = vp.fwd;
  const int64_t K = p.K, N = p.N;
  dlhs.fill_zero();
  drhs.fill_zero();
  std::vector<Acc> w(static_cast<size_t>(K * N)), acc(static_cast<size_t>(K * N));
  std::vector<Acc> a(static_cast<size_t>(K)), d(static_cast<size_t>(N));
  for (int64_t g = 0; g < p.G; ++g) {
    if (p.group_sizes[g] == 0) continue;  // drhs[g] stays zero
    for (int64_t i = 0; i < K * N; ++i) w[i] = static_cast<Acc>(rhs.get(g * K * N + i));
    std::fill(acc.begin(), acc.end(), Acc(0));
    for (int64_t row = p.group_starts[g]; row < p.group_starts[g + 1]; ++row) {
      for (int64_t k = 0; k < K; ++k) a[k] = static_cast<Acc>(lhs.get(row * K + k));
      for (int64_t n = 0; n < N; ++n) d[n] = static_cast<Acc>(dout.get(row * N + n));
      // dlhs[row, k] = sum_n dout[row, n] rhs[g, k, n]: rhs's row k is contiguous.
      for (int64_t k = 0; k < K; ++k) {
        Acc sum = Acc(0);
        for (int64_t n = 0; n < N; ++n) sum += d[n] * w[k * N + n];
        dlhs.set(row * K + k, static_cast<double>(sum));
      }
      // drhs[g] += lhs[row]^T dout[row]: one rank-1 update per row, rows in order.
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t n = 0; n < N; ++n) acc[k * N + n] += a[k] * d[n];
      }
    }
    for (int64_t i = 0; i < K * N; ++i) drhs.set(g * K * N + i, static_cast<double>(acc[i]));
  }
}

template void ragged_dot_vjp_reference<float>(const RaggedDotVjpProblem&, const Tensor&,
                                              const Tensor&, const Tensor&, Tensor&, Tensor&);
template void ragged_dot_vjp_reference<double>(const RaggedDotVjpProblem&, const Tensor&,
                                               const Tensor&, const Tensor&, Tensor&, Tensor&);

namespace {

void run_plain(const RaggedDotVjpProblem& problem, const TensorMap& inputs, TensorMap& outputs) {
  const Tensor& lhs = inputs.at("lhs");
  const Tensor& rhs = inputs.at("rhs");
  const Tensor& dout = inputs.at("dout");
  // f32 accumulation, as the forward's reference; f64 for an f64 cotangent.
  if (problem.dout_dtype == DType::kF64) {  // the accumulator of an f64 dout
    ragged_dot_vjp_reference<double>(problem, lhs, rhs, dout, outputs.at("dlhs"),
                                     outputs.at("drhs"));
  } else {
    ragged_dot_vjp_reference<float>(problem, lhs, rhs, dout, outputs.at("dlhs"),
                                    outputs.at("drhs"));
  }
}

// A precision preset as its passes on pieces (precision.h).
void run_reference(const RaggedDotVjpProblem& problem, const TensorMap& inputs,
                   TensorMap& outputs) {
  run_ragged_dot_vjp(problem, inputs, outputs, run_plain);
}

}  // namespace

const Implementation& ragged_dot_vjp_reference_implementation() {
  static const ReferenceImplementation<RaggedDotVjpProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
