// layer_norm: the math spec (binding, validation, counts, inputs, reference and oracle).
//
// Dimensions.
//   x      the input, any rank >= 1, normalized along one axis
//   C      x's extent along `axis`: the normalized extent (the length of scale and offset)
//   O      product of x's extents before `axis` (outer rows)
//   I      product of x's extents after `axis` (inner, contiguous); I = 1 for the last axis
//   rows   O * I independent normalizations, each over C elements with stride I
//
// out[o, c, i] = (x[o, c, i] - mean[o, i]) * rstd[o, i] * scale[c] + offset[c], with
// mean = sum_c x / C and rstd = 1 / sqrt(sum_c (x - mean)^2 / C + epsilon). RMSNorm
// (subtract_mean = false) drops the mean: rstd = 1 / sqrt(sum_c x^2 / C + epsilon).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ops/framework/bound_args.h"
#include "ops/framework/dtype.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// The parsed, validated view of layer_norm's BoundArgs that implementations work with.
struct LayerNormProblem {
  static constexpr std::string_view kOp = "layer_norm";
  static constexpr std::string_view kSummary =
      "layer norm / RMSNorm of x along one axis: (x-mean)*rsqrt(var+eps)*scale+offset";
  std::vector<int64_t> dims;  // x's extents
  int axis = 0;               // canonical, in [0, rank)
  int64_t O = 1, C = 1, I = 1;
  DType x_dtype = DType::kF32;  // also the output dtype
  bool has_scale = false, has_offset = false;
  DType scale_dtype = DType::kF32, offset_dtype = DType::kF32;
  double epsilon = 1e-6;
  bool subtract_mean = true;
  // Added to every scale before scaling (upstream's scale_offset, e.g. Gemma's 1 + scale); only
  // with a scale.
  double scale_offset = 0.0;

  int64_t rows() const { return O * I; }
  int64_t num_elements() const { return O * C * I; }
  bool last_axis() const { return I == 1; }
  static LayerNormProblem from(const BoundArgs& args);

  // Channel c's effective scale, scale[c] + scale_offset (1 without a scale), and offset (0
  // without one), in f64.
  double scale_at(const Tensor* scale, int64_t c) const {
    return scale == nullptr ? 1.0 : scale->get(c) + scale_offset;
  }
  static double offset_at(const Tensor* offset, int64_t c) {
    return offset == nullptr ? 0.0 : offset->get(c);
  }
};

// Half the smallest subnormal spacing of an output dtype: the absolute error of rounding a value
// below the normal range, which no relative bound covers (part of the error models).
double layer_norm_output_underflow(DType dtype);

// Per-row statistics of a forward pass, [O, I] row-major: what a layer_norm_vjp needs again
// (mean is 0 for RMSNorm).
struct LayerNormResiduals {
  std::vector<double> mean;
  std::vector<double> rstd;
};

using LayerNormOp = ProblemOp<LayerNormProblem>;

// The portable reference: every dtype, statistics accumulated in `Acc` (two passes: the mean,
// then the centred sum of squares). With Acc = double it is the float64 oracle of the whole
// output. `scale` / `offset` may be null (absent); `residuals`, when given, receives the per-row
// mean and rstd.
template <typename Acc>
void layer_norm_reference(const LayerNormProblem& problem,
                          // Inputs.
                          const Tensor& x,       // [O, C, I] x_dtype (x's own shape)
                          const Tensor* scale,   // [C] or null
                          const Tensor* offset,  // [C] or null
                          // Outputs.
                          Tensor& out,  // x's shape, x_dtype
                          LayerNormResiduals* residuals = nullptr);

}  // namespace tokamax
