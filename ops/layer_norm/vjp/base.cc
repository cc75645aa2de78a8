// layer_norm_vjp: binding (the forward's plus dout), inputs and outputs, FLOP/byte counts.
//
// Dimensions.
//   C      x's extent along `axis`: the normalized extent (the length of scale and offset)
//   O      product of x's extents before `axis`
//   I      product of x's extents after `axis`; I = 1 for the last axis
#include "ops/layer_norm/vjp/base.h"

#include "ops/framework/vjp.h"
#include "ops/layer_norm/api.h"

namespace tokamax {

LayerNormVjpProblem LayerNormVjpProblem::from(const BoundArgs& args) {
  LayerNormVjpProblem p;
  static_cast<LayerNormProblem&>(p) = LayerNormProblem::from(args);
  p.dout_dtype = args.tensor("dout").dtype;
  return p;
}

const Op* LayerNormVjpOp::primal() const { return &layer_norm_op(); }

template <>
BoundArgs ProblemOp<LayerNormVjpProblem>::bind_canonical(const nlohmann::json& args) const {
  // The forward's arguments as its bind takes them (same names, defaults, errors), plus dout of
  // the forward output's spec.
  return bind_vjp(layer_norm_op(), name(), args, cotangents());
}

template <>
std::vector<TensorDecl> ProblemOp<LayerNormVjpProblem>::inputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = layer_norm_op().inputs(args);
  decls.push_back({"dout", args.tensor("dout")});
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<LayerNormVjpProblem>::outputs(const BoundArgs& args) const {
  // The gradient of each differentiable input, in its spec.
  std::vector<TensorDecl> decls = {{"dx", args.tensor("x")}};
  if (args.has("scale")) decls.push_back({"dscale", args.tensor("scale")});
  if (args.has("offset")) decls.push_back({"doffset", args.tensor("offset")});
  return decls;
}

template <>
double ProblemOp<LayerNormVjpProblem>::flops(const BoundArgs& args) const {
  // Per element, layer norm: the statistics (1 add for the mean, subtract + multiply-add for the
  // variance: 4 flops), g = dout * s (1), the row sums of g and g * xhat (1 + 2), xhat (2), dx
  // (subtract, multiply-add, multiply: 5) = 15; RMSNorm drops the mean, its subtractions and
  // sum g (12). dscale adds a multiply-add (2), doffset an add (1) per element.
  const LayerNormVjpProblem p = LayerNormVjpProblem::from(args);
  double per_element = p.subtract_mean ? 15.0 : 12.0;
  if (p.has_scale) per_element += 2.0;
  if (p.has_offset) per_element += 1.0;
  return static_cast<double>(p.num_elements()) * per_element;
}

template <>
double ProblemOp<LayerNormVjpProblem>::bytes(const BoundArgs& args) const {
  // The minimum traffic: x and dout read once, dx written once, scale read once, dscale and
  // doffset written once (offset's values do not enter the gradient). A kernel meets it by
  // keeping a row, or a block of rows, in cache for its later passes.
  const LayerNormVjpProblem p = LayerNormVjpProblem::from(args);
  double bytes = 3.0 * static_cast<double>(p.num_elements()) * dtype_size(p.x_dtype);
  if (p.has_scale) bytes += 2.0 * static_cast<double>(p.C) * dtype_size(p.scale_dtype);
  if (p.has_offset) bytes += static_cast<double>(p.C) * dtype_size(p.offset_dtype);
  return bytes;
}

}  // namespace tokamax
