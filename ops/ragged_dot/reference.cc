// ragged_dot: the portable reference of every dimension-numbers form, templated on the
// accumulator (Acc = double is exact to the float64 oracle's rounding), and the "reference"
// implementation that runs it.
//
// Dimensions: as base.h.
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
namespace {

// trans_rhs and ragged_contracting (plain products only): each output's terms summed in order.
template <typename Acc>
void general_reference(const RaggedDotProblem& p, const Tensor& lhs, const Tensor& rhs,
                       Tensor& out) {
  dispatch_float(p.out_dtype, [&](auto out_type) {
    using O = decltype(out_type);
    O* out_data = out.data<O>();
    if (p.dims == RaggedDims::kRaggedContracting) {
      // out[g] = lhs_g^T rhs_g: k-outer over the group's rows, accumulators [M, N].
      std::vector<Acc> acc(static_cast<size_t>(p.M * p.N));
      for (int64_t g = 0; g < p.G; ++g) {
        std::fill(acc.begin(), acc.end(), Acc(0));
        for (int64_t k = p.group_starts[g]; k < p.group_starts[g + 1]; ++k) {
          for (int64_t m = 0; m < p.M; ++m) {
            const Acc a = static_cast<Acc>(lhs.get(k * p.M + m));
            for (int64_t n = 0; n < p.N; ++n)
              acc[m * p.N + n] += a * static_cast<Acc>(rhs.get(k * p.N + n));
          }
        }
        for (int64_t i = 0; i < p.M * p.N; ++i)
          out_data[g * p.M * p.N + i] = from_double<O>(acc[i]);
      }
      return;
    }
    // trans_rhs: out[row, n] = lhs[row] . rhs[g, n]; rows outside the groups are zero.
    for (int64_t row = 0; row < p.M; ++row) {
      const bool owned = p.owns(row);
      const int64_t g = owned ? p.group_of(row) : 0;
      for (int64_t n = 0; n < p.N; ++n) {
        Acc sum = 0;
        for (int64_t k = 0; owned && k < p.K; ++k) {
          sum += static_cast<Acc>(lhs.get(row * p.K + k)) *
                 static_cast<Acc>(rhs.get((g * p.N + n) * p.K + k));
        }
        out_data[row * p.N + n] = from_double<O>(sum);
      }
    }
  });
}

}  // namespace

template <typename Acc>
void ragged_dot_reference(const RaggedDotProblem& p, const Tensor& lhs, const Tensor& rhs,
                          Tensor& out, const Tensor* bias, const Tensor* scale) {
  if (p.dims != RaggedDims::kDefault) return general_reference<Acc>(p, lhs, rhs, out);
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
  std::vector<float> row_f32(static_cast<size_t>(K)),
      row_scales(static_cast<size_t>(p.scale_blocks));
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
          if (scale != nullptr)
            w *= static_cast<Acc>(scale->get((g * p.scale_blocks + k / bk) * N + n));
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
            out_row[n] =
                from_double<O>(apply_gate_up<Acc>(p.gate_up, p.situ, acc[n], acc[n + out_N]));
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
