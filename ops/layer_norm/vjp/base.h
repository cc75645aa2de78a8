// layer_norm_vjp: the math spec of layer_norm's gradient (binding, counts, inputs, reference).
//
// Dimensions.
//   x      the forward input, any rank >= 1, normalized along one axis
//   C      x's extent along `axis`: the normalized extent (the length of scale and offset)
//   O      product of x's extents before `axis` (outer rows)
//   I      product of x's extents after `axis` (inner, contiguous); I = 1 for the last axis
//   rows   O * I independent normalizations, each over C elements with stride I
//
// With xhat = (x - mean) * rstd (mean = 0 for RMSNorm), s' = scale + scale_offset (1 without a
// scale) and the cotangent dout of the forward output y = xhat * s' + offset, per row:
//   g       = dout * s'
//   dx      = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))   (layer norm)
//   dx      = rstd * (g - xhat * mean_c(g * xhat))               (RMSNorm)
//   dscale  = sum over rows of dout * xhat      (only with a scale)
//   doffset = sum over rows of dout             (only with an offset)
// epsilon sits inside rstd and does not change the formulas. Each gradient has the dtype of the
// input it differentiates; implementations accumulate in f32 (f64 for f64 x).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ops/framework/bound_args.h"
#include "ops/framework/op.h"
#include "ops/framework/problem_op.h"
#include "ops/framework/tensor.h"
#include "ops/layer_norm/base.h"

namespace tokamax {

// The forward problem plus the cotangent: dout has x's spec (bind_vjp checks it), so the VJP
// adds no extent of its own; kOp names the VJP op for its implementations.
struct LayerNormVjpProblem : LayerNormProblem {
  static constexpr std::string_view kOp = "layer_norm_vjp";
  static constexpr std::string_view kSummary =
      "gradient of layer_norm: dx, dscale, doffset from x, scale, offset and dout";
  DType dout_dtype = DType::kF32;  // = x_dtype

  static LayerNormVjpProblem from(const BoundArgs& args);
};

class LayerNormVjpOp : public ProblemOp<LayerNormVjpProblem> {
 public:
  const Op* primal() const override;
  std::vector<std::string> cotangents() const override { return {"dout"}; }
};

// The portable reference: every dtype, statistics and reductions accumulated in `Acc` (two
// statistics passes as the forward's reference, then the row sums of g and g * xhat, then dx;
// dscale and doffset summed over rows in order). With Acc = double it is the float64 oracle of
// every output. `scale` / `offset` may be null (absent); so may `dscale` / `doffset` (not
// wanted; they must be null when their parameter is absent).
template <typename Acc>
void layer_norm_vjp_reference(const LayerNormVjpProblem& problem,
                              // Inputs.
                              const Tensor& x,       // [O, C, I] x_dtype (x's own shape)
                              const Tensor* scale,   // [C] or null
                              const Tensor* offset,  // [C] or null (only its presence matters)
                              const Tensor& dout,    // x's shape, x_dtype
                              // Outputs.
                              Tensor& dx,        // x's shape, x_dtype
                              Tensor* dscale,    // [C] scale_dtype, or null
                              Tensor* doffset);  // [C] offset_dtype, or null

}  // namespace tokamax
