// ragged_dot: seeded inputs and group sizes, the oracle's cost and error model, the reference
// (the float64 oracle itself is in oracle.cc).
//
// Dimensions: as base.h (G owned groups, Gt entries of group_sizes, M, K, N of rhs, out_N).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"
#include "ops/ragged_dot/base.h"
#include "ops/ragged_dot/quantize.h"

namespace tokamax {

std::vector<int64_t> even_group_sizes(int64_t num_groups, int64_t total) {
  std::vector<int64_t> sizes(static_cast<size_t>(num_groups), 0);
  for (int64_t g = 0; g < num_groups; ++g) {
    sizes[g] = total / num_groups + (g < total % num_groups ? 1 : 0);
  }
  return sizes;
}

std::vector<int64_t> random_group_sizes(int64_t num_groups, int64_t total, uint64_t seed) {
  // Sorted uniform cut points over [0, total]: a uniform random composition, which leaves some
  // groups empty and some large, like real router outputs.
  std::vector<int64_t> cuts;
  const uint64_t stream = stream_id("group_sizes");
  for (int64_t g = 0; g + 1 < num_groups; ++g) {
    cuts.push_back(static_cast<int64_t>(uniform01(seed, stream, g) * (total + 1)));
  }
  std::sort(cuts.begin(), cuts.end());
  std::vector<int64_t> sizes;
  int64_t previous = 0;
  for (int64_t cut : cuts) {
    sizes.push_back(std::min(cut, total) - previous);
    previous = std::min(cut, total);
  }
  if (num_groups > 0) sizes.push_back(total - previous);
  return sizes;
}

TensorMap RaggedDotOp::make_inputs(const BoundArgs& args, uint64_t seed) const {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  TensorMap inputs;
  // Activations ~ N(0, 1); weights ~ N(0, 1/K) as after a fan-in initialisation, so outputs stay
  // O(1) at any K and low-precision outputs neither overflow nor underflow.
  Tensor lhs = normal_tensor(args.tensor("lhs"), seed, "lhs");
  const double rhs_scale = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(p.K, 1)));
  // Quantized weights: codes spread over the type's range (i8: sigma 36, |q| <= 125; f8e4m3:
  // N(0, 1)) and scales that bring the dequantized weights back to N(0, 1/K), each scale
  // different (+-17% at most) so that a wrong scale index shows.
  const double code_sigma = p.rhs_dtype == DType::kI8 ? 36.0 : 1.0;
  Tensor rhs = normal_tensor(args.tensor("rhs"), seed, "rhs", p.quantized() ? code_sigma : rhs_scale);
  if (p.quantized()) {
    const double base = rhs_scale / code_sigma;
    inputs.emplace("rhs_scale",
                   normal_tensor(args.tensor("rhs_scale"), seed, "rhs_scale", 0.05 * base, base));
  }
  const int64_t Gt = static_cast<int64_t>(p.all_group_sizes.size());
  Tensor group_sizes(TensorSpec{DType::kI32, {Gt}});
  for (int64_t g = 0; g < Gt; ++g)
    group_sizes.data<int32_t>()[g] = static_cast<int32_t>(p.all_group_sizes[g]);
  inputs.emplace("lhs", std::move(lhs));
  inputs.emplace("rhs", std::move(rhs));
  inputs.emplace("group_sizes", std::move(group_sizes));
  if (p.has_bias) {
    // Biases ~ N(0, 1/4): the size of a trained layer's, comparable to the product's O(1).
    inputs.emplace("rhs_bias", normal_tensor(args.tensor("rhs_bias"), seed, "rhs_bias", 0.5));
  }
  return inputs;
}

double RaggedDotOp::oracle_cost_per_output(const BoundArgs& args) const {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  return static_cast<double>(std::max<int64_t>(p.K, 1)) * (p.gate_up == GateUp::kNone ? 1 : 2);
}

ErrorModel RaggedDotOp::error_model(const BoundArgs& args) const {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  ErrorModel model;
  // Products of two bf16/f16/f32 values are exact in f32 only for 16-bit inputs, so the bound
  // counts one rounding per term plus the summation: K roundings of the accumulator type.
  model.accumulation_roundoff =
      unit_roundoff(p.out_dtype == DType::kF64 ? DType::kF64 : DType::kF32);
  // A precision preset sums P products of pieces per term (P K terms), each exact in f32, and
  // rounds or splits the operands first (operand_roundoff).
  const PrecisionPlan plan = p.precision_plan();
  model.accumulation_length = static_cast<double>(std::max<int64_t>(p.K, 1) * plan.passes()) +
                              (p.has_epilogue() ? 2.0 : 1.0);
  model.output_roundoff = unit_roundoff(p.out_dtype);
  model.operand_roundoff = plan.operand_roundoff;
  return model;
}

template <typename Acc>
void ragged_dot_reference(const RaggedDotProblem& p, const Tensor& lhs, const Tensor& rhs,
                          Tensor& out, const Tensor* bias, const Tensor* scale) {
  const int64_t K = p.K, N = p.N, out_N = p.out_N(), bk = p.block_k();
  if (p.has_bias && bias == nullptr) {
    throw InvalidArgument("ragged_dot reference: the problem has rhs_bias but none was given");
  }
  if (p.quantized() && scale == nullptr) {
    throw InvalidArgument("ragged_dot reference: the problem has rhs_scale but none was given");
  }
  std::vector<Acc> acc(static_cast<size_t>(N));
  // One group's weights in the accumulator (dequantized: code * scale), and one lhs row (with
  // maybe_quantize_lhs: s * q, the values the product is taken of).
  std::vector<Acc> rhs_g(static_cast<size_t>(K * N)), a(static_cast<size_t>(K));
  std::vector<float> row_f32(static_cast<size_t>(K)), row_scales(static_cast<size_t>(p.scale_blocks));
  std::vector<float> row_values(static_cast<size_t>(K));
  dispatch_float(p.out_dtype, [&](auto out_type) {
    using O = decltype(out_type);
    O* out_data = out.data<O>();
    if (p.zero_initialize) {
      for (int64_t i = 0; i < p.first_row() * out_N; ++i) out_data[i] = from_double<O>(0.0);
    }
    for (int64_t g = 0; g < p.G; ++g) {
      if (p.group_sizes[g] == 0) continue;
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t n = 0; n < N; ++n) {
          Acc w = static_cast<Acc>(rhs.get((g * K + k) * N + n));
          if (scale != nullptr) w *= static_cast<Acc>(scale->get((g * p.scale_blocks + k / bk) * N + n));
          rhs_g[k * N + n] = w;
        }
      }
      for (int64_t row = p.group_starts[g]; row < p.group_starts[g + 1]; ++row) {
        for (int64_t k = 0; k < K; ++k) a[k] = static_cast<Acc>(lhs.get(row * K + k));
        if (p.quantize_lhs) {
          for (int64_t k = 0; k < K; ++k) row_f32[k] = static_cast<float>(a[k]);
          quantize_row_values(p.rhs_dtype, row_f32.data(), K, bk, row_values.data(),
                              row_scales.data());
          for (int64_t k = 0; k < K; ++k) a[k] = static_cast<Acc>(row_values[k]);
        }
        std::fill(acc.begin(), acc.end(), Acc(0));
        // k-outer, n-inner: the rhs row is contiguous, and every output still sums its K
        // terms in order k = 0..K-1, the order the error bound assumes.
        for (int64_t k = 0; k < K; ++k) {
          const Acc* w = rhs_g.data() + k * N;
          for (int64_t n = 0; n < N; ++n) acc[n] += a[k] * w[n];
        }
        // The epilogue, in the accumulator: bias, then the activation or act(gate) * up.
        if (bias != nullptr) {
          for (int64_t n = 0; n < N; ++n) acc[n] += static_cast<Acc>(bias->get(g * N + n));
        }
        O* out_row = out_data + row * out_N;
        if (p.gate_up != GateUp::kNone) {
          for (int64_t n = 0; n < out_N; ++n) {
            out_row[n] = from_double<O>(apply_gate_up<Acc>(p.gate_up, acc[n], acc[n + out_N]));
          }
        } else {
          for (int64_t n = 0; n < N; ++n) {
            out_row[n] = from_double<O>(apply_activation<Acc>(p.activation, acc[n]));
          }
        }
      }
    }
    if (p.zero_initialize) {
      for (int64_t i = p.rows() * out_N; i < p.M * out_N; ++i) out_data[i] = from_double<O>(0.0);
    }
  });
}

template void ragged_dot_reference<float>(const RaggedDotProblem&, const Tensor&, const Tensor&,
                                          Tensor&, const Tensor*, const Tensor*);
template void ragged_dot_reference<double>(const RaggedDotProblem&, const Tensor&, const Tensor&,
                                           Tensor&, const Tensor*, const Tensor*);

namespace {

void run_reference(const RaggedDotProblem& given, const TensorMap& given_inputs,
                   TensorMap& outputs) {
  // A precision preset: the portable product of the expanded pieces (precision.h).
  const RaggedDotProblem problem = given.computed();
  const TensorMap inputs = expand_precision_operands(given, given_inputs);
  Tensor& out = outputs.at("out");
  const Tensor* bias = problem.has_bias ? &inputs.at("rhs_bias") : nullptr;
  const Tensor* scale = problem.quantized() ? &inputs.at("rhs_scale") : nullptr;
  // f64 outputs accumulate in f64; everything else in f32, as upstream's reference does.
  if (problem.out_dtype == DType::kF64) {
    ragged_dot_reference<double>(problem, inputs.at("lhs"), inputs.at("rhs"), out, bias, scale);
  } else {
    ragged_dot_reference<float>(problem, inputs.at("lhs"), inputs.at("rhs"), out, bias, scale);
  }
}

}  // namespace

const Implementation& ragged_dot_reference_implementation() {
  static const ReferenceImplementation<RaggedDotProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
