// ragged_dot: the float64 oracle of the other dimension numbers (trans_rhs, ragged_contracting),
// each sampled point's sum over its group's terms as a plain loop.
//
// Dimensions: as base.h.
#include <algorithm>
#include <cmath>

#include "ops/ragged_dot/oracle.h"

namespace tokamax {

OracleSample ragged_dot_general_oracle(const RaggedDotProblem& p, const TensorMap& inputs,
                                       std::span<const int64_t> index) {
  const Tensor& lhs = inputs.find("lhs")->second;
  const Tensor& rhs = inputs.find("rhs")->second;
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.assign(index.size(), 0.0);
  sample.magnitude.assign(index.size(), 0.0);
  for (size_t s = 0; s < index.size(); ++s) {
    double value = 0.0, magnitude = 0.0;
    if (p.dims == RaggedDims::kRaggedContracting) {
      // out[g, m, n] = sum over group g's rows k of K of lhs[k, m] rhs[k, n].
      const int64_t g = index[s] / (p.M * p.N), m = index[s] / p.N % p.M, n = index[s] % p.N;
      for (int64_t k = p.group_starts[g]; k < p.group_starts[g + 1]; ++k) {
        const double term = lhs.get(k * p.M + m) * rhs.get(k * p.N + n);
        value += term;
        magnitude += std::fabs(term);
      }
    } else {
      // trans_rhs: out[row, n] = sum over k of lhs[row, k] rhs[g, n, k]; rows outside the
      // groups are zero.
      const int64_t row = index[s] / p.N, n = index[s] % p.N;
      if (p.owns(row)) {
        const int64_t g = p.group_of(row);
        for (int64_t k = 0; k < p.K; ++k) {
          const double term = lhs.get(row * p.K + k) * rhs.get((g * p.N + n) * p.K + k);
          value += term;
          magnitude += std::fabs(term);
        }
      }
    }
    sample.value[s] = value;
    sample.magnitude[s] = magnitude;
  }
  return sample;
}

}  // namespace tokamax
