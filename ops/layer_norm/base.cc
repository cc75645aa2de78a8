// layer_norm: canonical binding, validation, FLOP/byte counts.
//
// Dimensions.
//   C      x's extent along `axis`: the normalized extent (the length of scale and offset)
//   O      product of x's extents before `axis`
//   I      product of x's extents after `axis`; I = 1 for the last axis
#include "ops/layer_norm/base.h"

#include <cmath>
#include <string>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

TensorSpec bind_tensor(const json& args, const char* name, const char* shape_doc,
                       int min_rank = 0) {
  return read_tensor_arg(
      "layer_norm: ", args, name,
      {.shape = shape_doc, .example = "bf16[384,384,128]", .min_rank = min_rank});
}

// scale / offset: absent or null = not used; otherwise a float tensor of shape [C].
bool bind_param(const json& args, const char* name, int64_t C, int axis, TensorSpec& spec) {
  if (!args.contains(name) || args.at(name).is_null()) return false;
  spec = bind_tensor(args, name, "[C]");
  if (spec.rank() != 1 || spec.dims[0] != C) {
    throw InvalidArgument(std::string("layer_norm: ") + name + " must have shape [C] = [" +
                              std::to_string(C) + "] (x's extent along axis " +
                              std::to_string(axis) + "), got " + spec.to_string(),
                          name);
  }
  return true;
}

}  // namespace

LayerNormProblem LayerNormProblem::from(const BoundArgs& args) {
  LayerNormProblem p;
  const TensorSpec x = args.tensor("x");
  p.dims = x.dims;
  p.x_dtype = x.dtype;
  p.axis = args.option("axis").get<int>();
  p.O = p.C = p.I = 1;
  for (int d = 0; d < x.rank(); ++d) {
    if (d < p.axis) p.O *= x.dims[d];
    if (d == p.axis) p.C = x.dims[d];
    if (d > p.axis) p.I *= x.dims[d];
  }
  p.has_scale = args.has("scale");
  if (p.has_scale) p.scale_dtype = args.tensor("scale").dtype;
  p.has_offset = args.has("offset");
  if (p.has_offset) p.offset_dtype = args.tensor("offset").dtype;
  p.epsilon = args.option("epsilon").get<double>();
  p.subtract_mean = args.option("subtract_mean").get<bool>();
  if (args.has("scale_offset")) p.scale_offset = args.option("scale_offset").get<double>();
  return p;
}

template <>
BoundArgs ProblemOp<LayerNormProblem>::bind_canonical(const json& args) const {
  check_arg_names("layer_norm: ", args,
                  {"x", "scale", "offset", "axis", "epsilon", "subtract_mean", "scale_offset"});
  const TensorSpec x = bind_tensor(args, "x", "[..., C, ...]", /*min_rank=*/1);
  int axis = -1;
  if (args.contains("axis") && !args.at("axis").is_null()) {
    const json& value = args.at("axis");
    if (!value.is_number_integer()) {
      throw InvalidArgument("layer_norm: axis must be an integer, got " + value.dump(), "axis");
    }
    const int64_t a = value.get<int64_t>();
    if (a < -x.rank() || a >= x.rank()) {
      throw InvalidArgument("layer_norm: axis " + std::to_string(a) + " is out of range for x " +
                                x.to_string() + " (rank " + std::to_string(x.rank()) + ")",
                            "axis");
    }
    axis = static_cast<int>(a);
  }
  if (axis < 0) axis += x.rank();
  const int64_t C = x.dims[axis];

  double epsilon = 1e-6;
  if (args.contains("epsilon") && !args.at("epsilon").is_null()) {
    const json& value = args.at("epsilon");
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0.0) {
      throw InvalidArgument("layer_norm: epsilon must be a finite number >= 0, got " + value.dump(),
                            "epsilon");
    }
    epsilon = value.get<double>();
  }
  const bool subtract_mean = read_bool_arg("layer_norm: ", args, "subtract_mean", true);
  TensorSpec scale, offset;
  const bool has_scale = bind_param(args, "scale", C, axis, scale);
  const bool has_offset = bind_param(args, "offset", C, axis, offset);
  double scale_offset = 0.0;
  if (args.contains("scale_offset") && !args.at("scale_offset").is_null()) {
    const json& value = args.at("scale_offset");
    if (!value.is_number() || !std::isfinite(value.get<double>())) {
      throw InvalidArgument("layer_norm: scale_offset must be a finite number, got " + value.dump(),
                            "scale_offset");
    }
    scale_offset = value.get<double>();
    if (scale_offset != 0.0 && !has_scale) {
      throw InvalidArgument(
          "layer_norm: scale_offset is added to the scale, but there is no scale (give scale, or "
          "fold the offset into a constant scale)",
          "scale_offset");
    }
  }

  BoundArgs bound;
  bound.op = "layer_norm";
  bound.args = {
      {"x", x.to_string()}, {"axis", axis}, {"epsilon", epsilon}, {"subtract_mean", subtract_mean}};
  if (has_scale) bound.args["scale"] = scale.to_string();
  if (has_offset) bound.args["offset"] = offset.to_string();
  // The default stays out of the canonical form, so cases without it keep their cache keys.
  if (scale_offset != 0.0) bound.args["scale_offset"] = scale_offset;
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<LayerNormProblem>::inputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = {{"x", args.tensor("x")}};
  if (args.has("scale")) decls.push_back({"scale", args.tensor("scale")});
  if (args.has("offset")) decls.push_back({"offset", args.tensor("offset")});
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<LayerNormProblem>::outputs(const BoundArgs& args) const {
  return {{"out", args.tensor("x")}};
}

template <>
double ProblemOp<LayerNormProblem>::flops(const BoundArgs& args) const {
  // Per element: layer norm adds for the mean, subtract + multiply-add for the variance,
  // subtract, multiply by rstd and multiply-add of scale/offset (8); RMSNorm a multiply-add for
  // the mean square and three multiplies/adds to normalize (5).
  const LayerNormProblem p = LayerNormProblem::from(args);
  return static_cast<double>(p.num_elements()) * (p.subtract_mean ? 8.0 : 5.0);
}

template <>
double ProblemOp<LayerNormProblem>::bytes(const BoundArgs& args) const {
  // x read once, out written once, the parameters read once.
  const LayerNormProblem p = LayerNormProblem::from(args);
  double bytes = 2.0 * static_cast<double>(p.num_elements()) * dtype_size(p.x_dtype);
  if (p.has_scale) bytes += static_cast<double>(p.C) * dtype_size(p.scale_dtype);
  if (p.has_offset) bytes += static_cast<double>(p.C) * dtype_size(p.offset_dtype);
  return bytes;
}

}  // namespace tokamax
