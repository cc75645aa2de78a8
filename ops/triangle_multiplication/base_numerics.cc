// triangle_multiplication: seeded inputs, the oracle's cost and the error model.
#include <cmath>
#include <string>

#include "ops/framework/random.h"
#include "ops/triangle_multiplication/base.h"

namespace tokamax {

// x ~ N(0, 1); the mask of a padded chain (the last 1/16 of the residues, at least one when
// N > 1, are padding: mask[i, j] = both valid), so that masked pairs occur at every size;
// projections ~ N(0, 1 / fan-in) so that every stage stays near unit size; norm scales ~ 1 +
// N(0, 0.1), offsets ~ N(0, 0.1) (a trained layer's, and a wrong index shows).
template <>
TensorMap ProblemOp<TriangleMultiplicationProblem>::make_inputs(const BoundArgs& args,
                                                                uint64_t seed) const {
  const TriangleMultiplicationProblem p = TriangleMultiplicationProblem::from(args);
  TensorMap inputs;
  inputs.emplace("x", normal_tensor(args.tensor("x"), seed, "x"));
  Tensor mask(args.tensor("mask"));
  const int64_t valid = p.N > 1 ? p.N - std::max<int64_t>(1, p.N / 16) : p.N;
  for (int64_t i = 0; i < p.N; ++i) {
    for (int64_t j = 0; j < p.N; ++j) mask.data<bool>()[i * p.N + j] = i < valid && j < valid;
  }
  inputs.emplace("mask", std::move(mask));
  const double in = 1.0 / std::sqrt(static_cast<double>(p.C));
  const double hidden = 1.0 / std::sqrt(static_cast<double>(p.H));
  for (const auto& [name, stddev, mean] :
       {std::tuple{"projection_in_weights", in, 0.0}, std::tuple{"gate_in_weights", in, 0.0},
        std::tuple{"projection_out_weights", hidden, 0.0}, std::tuple{"gate_out_weights", in, 0.0},
        std::tuple{"layernorm_in_scale", 0.1, 1.0}, std::tuple{"layernorm_in_offset", 0.1, 0.0},
        std::tuple{"layernorm_out_scale", 0.1, 1.0},
        std::tuple{"layernorm_out_offset", 0.1, 0.0}}) {
    inputs.emplace(name, normal_tensor(args.tensor(name), seed, name, stddev, mean));
  }
  return inputs;
}

template <>
double ProblemOp<TriangleMultiplicationProblem>::oracle_cost_per_output(
    const BoundArgs& args) const {
  // The projections of the 2 N positions an output's product reads (C x 4 H each; the oracle
  // caches them across samples, which this does not count), the product and the output rows.
  const TriangleMultiplicationProblem p = TriangleMultiplicationProblem::from(args);
  return 2.0 * p.N * p.C * 4.0 * p.H + 2.0 * p.N * p.H + p.H + p.C;
}

template <>
ErrorModel ProblemOp<TriangleMultiplicationProblem>::error_model(const BoundArgs& args) const {
  // One unit for every stage (oracle.cc carries each stage's error magnitude into the next):
  // gamma of the longest sums (C in the input norm and projections, N in the triangle product,
  // H in the output norm and projection), plus one rounding to x's dtype of each stage's value
  // for 16-bit inputs (the magnitudes hold each stage's |value|).
  const TriangleMultiplicationProblem p = TriangleMultiplicationProblem::from(args);
  return ErrorModel{.accumulation_roundoff = unit_roundoff(DType::kF32),
                    .accumulation_length = static_cast<double>(p.C + p.N + p.H + 16),
                    .output_roundoff = unit_roundoff(p.x_dtype),
                    .operand_roundoff = p.x_dtype == DType::kF32 ? 0.0 : unit_roundoff(p.x_dtype)};
}

}  // namespace tokamax
