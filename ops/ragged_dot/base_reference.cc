// ragged_dot: seeded inputs and group sizes, the float64 oracle, its error model, the reference.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"
#include "ops/ragged_dot/base.h"

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
  Tensor rhs = normal_tensor(args.tensor("rhs"), seed, "rhs", rhs_scale);
  Tensor group_sizes(TensorSpec{DType::kI32, {p.G}});
  for (int64_t g = 0; g < p.G; ++g)
    group_sizes.data<int32_t>()[g] = static_cast<int32_t>(p.group_sizes[g]);
  inputs.emplace("lhs", std::move(lhs));
  inputs.emplace("rhs", std::move(rhs));
  inputs.emplace("group_sizes", std::move(group_sizes));
  return inputs;
}

OracleSample RaggedDotOp::oracle(const BoundArgs& args, const TensorMap& inputs,
                                 std::string_view output, std::span<const int64_t> index) const {
  if (output != "out")
    throw InvalidArgument("ragged_dot has no output '" + std::string(output) + "'");
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  const Tensor& lhs = inputs.find("lhs")->second;
  const Tensor& rhs = inputs.find("rhs")->second;
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.resize(index.size());
  sample.magnitude.resize(index.size());
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t row = index[s] / p.N, col = index[s] % p.N;
    if (row >= p.rows()) continue;  // past the group sum: exactly zero
    const int64_t g = std::upper_bound(p.group_starts.begin(), p.group_starts.end(), row) -
                      p.group_starts.begin() - 1;
    double value = 0.0, magnitude = 0.0;
    for (int64_t k = 0; k < p.K; ++k) {
      const double term = lhs.get(row * p.K + k) * rhs.get((g * p.K + k) * p.N + col);
      value += term;
      magnitude += std::fabs(term);
    }
    sample.value[s] = value;
    sample.magnitude[s] = magnitude;
  }
  return sample;
}

double RaggedDotOp::oracle_cost_per_output(const BoundArgs& args) const {
  return static_cast<double>(std::max<int64_t>(RaggedDotProblem::from(args).K, 1));
}

ErrorModel RaggedDotOp::error_model(const BoundArgs& args) const {
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  ErrorModel model;
  // Products of two bf16/f16/f32 values are exact in f32 only for 16-bit inputs, so the bound
  // counts one rounding per term plus the summation: K roundings of the accumulator type.
  model.accumulation_roundoff =
      unit_roundoff(p.out_dtype == DType::kF64 ? DType::kF64 : DType::kF32);
  model.accumulation_length = static_cast<double>(std::max<int64_t>(p.K, 1)) + 1.0;
  model.output_roundoff = unit_roundoff(p.out_dtype);
  return model;
}

template <typename Acc>
void ragged_dot_reference(const RaggedDotProblem& p, const Tensor& lhs, const Tensor& rhs,
                          Tensor& out) {
  const int64_t K = p.K, N = p.N;
  std::vector<Acc> acc(static_cast<size_t>(N));
  dispatch_float(p.lhs_dtype, [&](auto lhs_type) {
    using L = decltype(lhs_type);
    dispatch_float(p.rhs_dtype, [&](auto rhs_type) {
      using R = decltype(rhs_type);
      dispatch_float(p.out_dtype, [&](auto out_type) {
        using O = decltype(out_type);
        const L* lhs_data = lhs.data<L>();
        const R* rhs_data = rhs.data<R>();
        O* out_data = out.data<O>();
        for (int64_t g = 0; g < p.G; ++g) {
          const R* rhs_g = rhs_data + g * K * N;
          for (int64_t row = p.group_starts[g]; row < p.group_starts[g + 1]; ++row) {
            std::fill(acc.begin(), acc.end(), Acc(0));
            // k-outer, n-inner: the rhs row is contiguous, and every output still sums its K
            // terms in order k = 0..K-1, the order the error bound assumes.
            for (int64_t k = 0; k < K; ++k) {
              const Acc a = static_cast<Acc>(to_double(lhs_data[row * K + k]));
              const R* rhs_row = rhs_g + k * N;
              for (int64_t n = 0; n < N; ++n) acc[n] += a * static_cast<Acc>(to_double(rhs_row[n]));
            }
            for (int64_t n = 0; n < N; ++n) out_data[row * N + n] = from_double<O>(acc[n]);
          }
        }
        for (int64_t i = p.rows() * N; i < p.M * N; ++i) out_data[i] = from_double<O>(0.0);
      });
    });
  });
}

template void ragged_dot_reference<float>(const RaggedDotProblem&, const Tensor&, const Tensor&,
                                          Tensor&);
template void ragged_dot_reference<double>(const RaggedDotProblem&, const Tensor&, const Tensor&,
                                           Tensor&);

namespace {

void run_reference(const RaggedDotProblem& problem, const TensorMap& inputs, TensorMap& outputs) {
  Tensor& out = outputs.at("out");
  // f64 outputs accumulate in f64; everything else in f32, as upstream's reference does.
  if (problem.out_dtype == DType::kF64) {
    ragged_dot_reference<double>(problem, inputs.at("lhs"), inputs.at("rhs"), out);
  } else {
    ragged_dot_reference<float>(problem, inputs.at("lhs"), inputs.at("rhs"), out);
  }
}

}  // namespace

const Implementation& ragged_dot_reference_implementation() {
  static const ReferenceImplementation<RaggedDotProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
