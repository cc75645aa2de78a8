// ragged_gather_reduce: binding, validation, tensors and counts.
#include "ops/ragged_gather_reduce/base.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

constexpr const char* kPrefix = "ragged_gather_reduce: ";

// A per-route argument `name`: rank 1 with I entries, of one of the dtypes `what` names.
TensorSpec read_route_arg(const json& args, const std::string& name, int64_t I,
                          bool (*dtype_ok)(DType), const std::string& what,
                          std::string_view example) {
  const TensorSpec spec = read_tensor_arg(
      kPrefix, args, name,
      {.shape = "[input_size]", .example = example, .rank = 1, .float_only = false});
  if (spec.dims[0] != I || !dtype_ok(spec.dtype)) {
    throw InvalidArgument(std::string(kPrefix) + name + " must be " + what + "[input_size = " +
                              std::to_string(I) + "] (one per index), got " + spec.to_string(),
                          name);
  }
  return spec;
}

}  // namespace

RaggedGatherReduceProblem RaggedGatherReduceProblem::from(const BoundArgs& args) {
  RaggedGatherReduceProblem p;
  const TensorSpec x = args.tensor("x");
  p.R = x.dims[0];
  p.h = x.dims[1];
  p.x_dtype = x.dtype;
  p.I = args.tensor("indices").dims[0];
  p.weights_dtype = args.tensor("topk_weights").dtype;
  p.g = args.option("reduce_group_size").get<int64_t>();
  return p;
}

template <>
BoundArgs ProblemOp<RaggedGatherReduceProblem>::bind_canonical(const json& args) const {
  check_arg_names(kPrefix, args,
                  {"x", "indices", "topk_weights", "valid_rows_mask", "reduce_group_size"});
  const TensorSpec x = read_tensor_arg(
      kPrefix, args, "x",
      {.shape = "[num_rows, hidden_size]", .example = "bf16[8192,4096]", .rank = 2});
  if (!is_kernel_float(x.dtype)) {
    throw InvalidArgument("ragged_gather_reduce: x must be f32, bf16 or f16, got " + x.to_string(),
                          "x");
  }
  const TensorSpec indices = read_tensor_arg(
      kPrefix, args, "indices",
      {.shape = "[input_size]", .example = "i32[8192]", .rank = 1, .float_only = false});
  const int64_t I = indices.dims[0];
  if (x.dims[0] > std::numeric_limits<int32_t>::max()) {
    throw InvalidArgument(
        "ragged_gather_reduce: x " + x.to_string() + " has more rows than i32 indices can name",
        "x");
  }
  if (x.dims[0] == 0 && I > 0) {
    throw InvalidArgument(
        "ragged_gather_reduce: x " + x.to_string() + " has no rows for the routes to read", "x");
  }
  if (indices.dtype != DType::kI32) {
    throw InvalidArgument(
        "ragged_gather_reduce: indices must be i32[input_size], got " + indices.to_string(),
        "indices");
  }
  const TensorSpec weights =
      read_route_arg(args, "topk_weights", I, is_kernel_float, "f32, bf16 or f16 ", "bf16[8192]");
  const TensorSpec valid = read_route_arg(
      args, "valid_rows_mask", I, [](DType t) { return t == DType::kBool; }, "bool", "bool[8192]");
  const int64_t g = read_int_arg(kPrefix, args, "reduce_group_size", 1, std::max<int64_t>(I, 1),
                                 "[1, input_size = " + std::to_string(I) + "] dividing input_size");
  if (I % g != 0) {
    throw InvalidArgument("ragged_gather_reduce: input_size " + std::to_string(I) +
                              " (routes) must be a multiple of reduce_group_size " +
                              std::to_string(g),
                          "reduce_group_size");
  }
  BoundArgs bound;
  bound.op = std::string(RaggedGatherReduceProblem::kOp);
  bound.args = {{"x", x.to_string()},
                {"indices", indices.to_string()},
                {"topk_weights", weights.to_string()},
                {"valid_rows_mask", valid.to_string()},
                {"reduce_group_size", g}};
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<RaggedGatherReduceProblem>::inputs(const BoundArgs& args) const {
  return {{"x", args.tensor("x")},
          {"indices", args.tensor("indices")},
          {"topk_weights", args.tensor("topk_weights")},
          {"valid_rows_mask", args.tensor("valid_rows_mask")}};
}

template <>
std::vector<TensorDecl> ProblemOp<RaggedGatherReduceProblem>::outputs(const BoundArgs& args) const {
  const RaggedGatherReduceProblem p = RaggedGatherReduceProblem::from(args);
  return {{"out", TensorSpec{p.x_dtype, {p.T(), p.h}}}};
}

template <>
double ProblemOp<RaggedGatherReduceProblem>::flops(const BoundArgs& args) const {
  // A multiply-add per element of each valid route (kGeneratedValidFraction of them).
  const RaggedGatherReduceProblem p = RaggedGatherReduceProblem::from(args);
  return 2.0 * kGeneratedValidFraction * static_cast<double>(p.I) * static_cast<double>(p.h);
}

template <>
double ProblemOp<RaggedGatherReduceProblem>::bytes(const BoundArgs& args) const {
  // The route vectors read; each distinct source row of a valid route read once at best (no
  // more of them than x has); the tokens written.
  const RaggedGatherReduceProblem p = RaggedGatherReduceProblem::from(args);
  const double routes = static_cast<double>(p.I);
  const double row_bytes = static_cast<double>(p.h) * dtype_size(p.x_dtype);
  const double rows_read = std::min(kGeneratedValidFraction * routes, static_cast<double>(p.R));
  return routes * (4.0 + dtype_size(p.weights_dtype) + 1.0) + rows_read * row_bytes +
         static_cast<double>(p.T()) * row_bytes;
}

}  // namespace tokamax
