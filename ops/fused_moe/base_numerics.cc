// fused_moe: seeded inputs, the oracle's cost and the error model.
#include <cmath>
#include <string>
#include <utility>

#include "ops/framework/random.h"
#include "ops/fused_moe/base.h"

namespace tokamax {

// x and gating ~ N(0, 1); the weights scaled by 1 / sqrt(fan-in) so that the gate/up values and
// the output stay near unit size whatever H and I are (trained layers' scale); biases ~ N(0,
// 0.1). Routing then spreads the tokens over the experts at random, as a trained router does
// on average.
template <>
TensorMap ProblemOp<FusedMoeProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  const FusedMoeProblem p = FusedMoeProblem::from(args);
  TensorMap inputs;
  inputs.emplace("x", normal_tensor(args.tensor("x"), seed, "x"));
  // Quantized experts: codes spread over the type's range (i8: sigma 36, f8e4m3: N(0, 1)) and
  // scales that bring the weights back to N(0, 1 / fan-in), each different (+-17% at most) so
  // that a wrong scale index shows.
  const double code_sigma = !p.quantized() ? 1.0 : p.w_dtype == DType::kI8 ? 36.0 : 1.0;
  for (const auto& [w, fan_in] : {std::pair{"w1", p.H}, std::pair{"w2", p.I}}) {
    const double sigma = 1.0 / std::sqrt(static_cast<double>(fan_in));
    const std::string name = w;
    if (!p.quantized()) {
      inputs.emplace(name, normal_tensor(args.tensor(name), seed, name, sigma));
      continue;
    }
    inputs.emplace(name, normal_tensor(args.tensor(name), seed, name, code_sigma));
    const std::string scale = name + "_scale";
    const double base = sigma / code_sigma;
    inputs.emplace(scale, normal_tensor(args.tensor(scale), seed, scale, 0.05 * base, base));
  }
  inputs.emplace("gating", normal_tensor(args.tensor("gating"), seed, "gating"));
  for (const char* bias : {"w1_bias", "w2_bias"}) {
    if (args.has(bias)) inputs.emplace(bias, normal_tensor(args.tensor(bias), seed, bias, 0.1));
  }
  return inputs;
}

template <>
double ProblemOp<FusedMoeProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  // Each route's hidden vector (H x 2 I) and its column of w2 (I); tokens sampled more than once
  // share the hidden vectors (oracle.cc), which this does not count.
  const FusedMoeProblem p = FusedMoeProblem::from(args);
  return static_cast<double>(p.k) *
         (2.0 * static_cast<double>(p.H) * static_cast<double>(p.I) + static_cast<double>(p.I));
}

template <>
ErrorModel ProblemOp<FusedMoeProblem>::error_model(const BoundArgs& args) const {
  // One f32 accumulation length for every stage whose error the oracle's magnitude carries (the
  // gate/up products over H, the down product over I, the softmax over E and its renormalisation
  // over k, the weighted sum of k routes): gamma of their total bounds each. The activation and
  // each route's down projection may be rounded to x's dtype (a chain of ops stores them): two
  // roundings of the operands of the later stages. Quantized weights: the f32 product of code
  // and scale (one rounding per product).
  const FusedMoeProblem p = FusedMoeProblem::from(args);
  return ErrorModel{
      .accumulation_roundoff = unit_roundoff(DType::kF32),
      .accumulation_length =
          static_cast<double>(p.H + p.I + p.E + 2 * p.k + 16 + (p.quantized() ? 2 : 0)),
      .output_roundoff = unit_roundoff(p.x_dtype),
      .operand_roundoff = p.x_dtype == DType::kF32 ? 0.0 : 2.0 * unit_roundoff(p.x_dtype)};
}

}  // namespace tokamax
