// triangle_multiplication: binding, validation, tensors and counts.
#include "ops/triangle_multiplication/base.h"

#include <cmath>
#include <string>
#include <vector>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

constexpr const char* kPrefix = "triangle_multiplication: ";

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (int64_t d : dims) text += (text.size() > 1 ? "," : "") + std::to_string(d);
  return text + "]";
}

// A float tensor of exactly `dims` (their names in `shape`).
TensorSpec read_exact(const json& args, const char* name, const std::vector<int64_t>& dims,
                      const char* shape) {
  const TensorSpec spec = read_tensor_arg(
      kPrefix, args, name,
      {.shape = shape, .example = "bf16[64]", .rank = static_cast<int>(dims.size())});
  if (spec.dims != dims) {
    throw InvalidArgument(std::string(kPrefix) + name + " must be " + shape + " = " +
                              dims_text(dims) + ", got " + spec.to_string(),
                          name);
  }
  if (!is_kernel_float(spec.dtype)) {
    throw InvalidArgument(
        std::string(kPrefix) + name + " must be f32, bf16 or f16, got " + spec.to_string(), name);
  }
  return spec;
}

}  // namespace

TriangleMultiplicationProblem TriangleMultiplicationProblem::from(const BoundArgs& args) {
  TriangleMultiplicationProblem p;
  const TensorSpec x = args.tensor("x");
  p.N = x.dims[0];
  p.C = x.dims[2];
  p.x_dtype = x.dtype;
  p.H = args.tensor("layernorm_out_scale").dims[0];
  p.D = args.tensor("projection_out_weights").dims[1];
  p.outgoing = args.option("triangle_type").get<std::string>() == "outgoing";
  p.epsilon = args.option("epsilon").get<double>();
  return p;
}

template <>
BoundArgs ProblemOp<TriangleMultiplicationProblem>::bind_canonical(const json& args) const {
  check_arg_names(
      kPrefix, args,
      {"x", "mask", "projection_in_weights", "gate_in_weights", "projection_out_weights",
       "gate_out_weights", "layernorm_in_scale", "layernorm_in_offset", "layernorm_out_scale",
       "layernorm_out_offset", "triangle_type", "epsilon"});
  const TensorSpec x = read_tensor_arg(
      kPrefix, args, "x", {.shape = "[N, N, C]", .example = "bf16[384,384,128]", .rank = 3});
  if (x.dims[0] != x.dims[1] || !is_kernel_float(x.dtype)) {
    throw InvalidArgument(std::string(kPrefix) +
                              "x must be f32, bf16 or f16 [N, N, C] (a square pair "
                              "representation), got " +
                              x.to_string(),
                          "x");
  }
  const int64_t N = x.dims[0], C = x.dims[2];
  const TensorSpec mask = read_tensor_arg(
      kPrefix, args, "mask",
      {.shape = "[N, N]", .example = "bool[384,384]", .rank = 2, .float_only = false});
  if (mask.dtype != DType::kBool || mask.dims != std::vector<int64_t>{N, N}) {
    throw InvalidArgument(std::string(kPrefix) + "mask must be bool[N, N] = bool" +
                              dims_text({N, N}) + ", got " + mask.to_string(),
                          "mask");
  }
  // H and D from the output norm and projection; every other weight must agree.
  const TensorSpec norm_out = read_tensor_arg(kPrefix, args, "layernorm_out_scale",
                                              {.shape = "[H]", .example = "bf16[128]", .rank = 1});
  const TensorSpec proj_out =
      read_tensor_arg(kPrefix, args, "projection_out_weights",
                      {.shape = "[H, D]", .example = "bf16[128,128]", .rank = 2});
  const int64_t H = norm_out.dims[0], D = proj_out.dims[1];
  if (C < 1 || H < 1 || D < 1) {
    throw InvalidArgument(std::string(kPrefix) + "C, H and D must be >= 1 (x " + x.to_string() +
                              ", projection_out_weights " + proj_out.to_string() + ")",
                          C < 1 ? "x" : "projection_out_weights");
  }
  json bound_args = {{"x", x.to_string()}, {"mask", mask.to_string()}};
  const std::vector<std::pair<const char*, std::pair<std::vector<int64_t>, const char*>>> weights =
      {{"projection_in_weights", {{C, 2, H}, "[C, 2, H]"}},
       {"gate_in_weights", {{C, 2, H}, "[C, 2, H]"}},
       {"projection_out_weights", {{H, D}, "[H, D]"}},
       {"gate_out_weights", {{C, D}, "[C, D]"}},
       {"layernorm_in_scale", {{C}, "[C]"}},
       {"layernorm_in_offset", {{C}, "[C]"}},
       {"layernorm_out_scale", {{H}, "[H]"}},
       {"layernorm_out_offset", {{H}, "[H]"}}};
  for (const auto& [name, shape] : weights) {
    bound_args[name] = read_exact(args, name, shape.first, shape.second).to_string();
  }
  if (!args.contains("triangle_type") || !args.at("triangle_type").is_string() ||
      (args.at("triangle_type") != "incoming" && args.at("triangle_type") != "outgoing")) {
    throw InvalidArgument(std::string(kPrefix) +
                              "triangle_type must be incoming or outgoing, got " +
                              (args.contains("triangle_type") ? args.at("triangle_type").dump()
                                                              : std::string("nothing")),
                          "triangle_type");
  }
  bound_args["triangle_type"] = args.at("triangle_type");
  double epsilon = 1e-6;
  if (args.contains("epsilon") && !args.at("epsilon").is_null()) {
    const json& value = args.at("epsilon");
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() <= 0.0) {
      throw InvalidArgument(
          std::string(kPrefix) + "epsilon must be a finite number > 0, got " + value.dump(),
          "epsilon");
    }
    epsilon = value.get<double>();
  }
  bound_args["epsilon"] = epsilon;
  BoundArgs bound;
  bound.op = std::string(TriangleMultiplicationProblem::kOp);
  bound.args = std::move(bound_args);
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<TriangleMultiplicationProblem>::inputs(
    const BoundArgs& args) const {
  std::vector<TensorDecl> decls = {{"x", args.tensor("x")}, {"mask", args.tensor("mask")}};
  for (const char* name : kTriangleWeights) decls.push_back({name, args.tensor(name)});
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<TriangleMultiplicationProblem>::outputs(
    const BoundArgs& args) const {
  const TriangleMultiplicationProblem p = TriangleMultiplicationProblem::from(args);
  return {{"out", TensorSpec{p.x_dtype, {p.N, p.N, p.D}}}};
}

template <>
double ProblemOp<TriangleMultiplicationProblem>::flops(const BoundArgs& args) const {
  // The products: the input projections (2 x [C, 2H]) and the output gate ([C, D]) per
  // position, the triangle product (H batches of N x N x N), the output projection ([H, D]).
  const TriangleMultiplicationProblem p = TriangleMultiplicationProblem::from(args);
  const double P = static_cast<double>(p.positions()), N = static_cast<double>(p.N);
  return 2.0 * P * p.C * (4.0 * p.H + p.D) + 2.0 * p.H * N * N * N + 2.0 * P * p.H * p.D;
}

template <>
double ProblemOp<TriangleMultiplicationProblem>::bytes(const BoundArgs& args) const {
  // x, mask and the weights read once; the output written once.
  const TriangleMultiplicationProblem p = TriangleMultiplicationProblem::from(args);
  double total = static_cast<double>(p.positions()) *
                 (p.C * dtype_size(p.x_dtype) + 1.0 + p.D * dtype_size(p.x_dtype));
  for (const char* name : kTriangleWeights) {
    total += static_cast<double>(args.tensor(name).size_bytes());
  }
  return total;
}

}  // namespace tokamax
