// ragged_gather: binding, validation, tensors and counts.
#include "ops/ragged_gather/base.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

constexpr const char* kPrefix = "ragged_gather: ";

}  // namespace

RaggedGatherProblem RaggedGatherProblem::from(const BoundArgs& args) {
  RaggedGatherProblem p;
  const TensorSpec x = args.tensor("x");
  p.in = x.dims[0];
  p.h = x.dims[1];
  p.dtype = x.dtype;
  p.out = args.tensor("indices").dims[0];
  p.start = args.option("start").get<int64_t>();
  p.end = args.option("end").get<int64_t>();
  return p;
}

template <>
BoundArgs ProblemOp<RaggedGatherProblem>::bind_canonical(const json& args) const {
  check_arg_names(kPrefix, args, {"x", "indices", "start", "end"});
  const TensorSpec x = read_tensor_arg(kPrefix, args, "x",
                                       {.shape = "[in_size, hidden_size]",
                                        .example = "bf16[8192,4096]",
                                        .rank = 2,
                                        .float_only = false});
  const TensorSpec indices = read_tensor_arg(
      kPrefix, args, "indices",
      {.shape = "[out_size]", .example = "i32[81920]", .rank = 1, .float_only = false});
  if (indices.dtype != DType::kI32) {
    throw InvalidArgument(
        "ragged_gather: indices must be i32[out_size], got " + indices.to_string(), "indices");
  }
  const int64_t out = indices.dims[0];
  const int64_t start =
      read_int_arg(kPrefix, args, "start", 0, out, "[0, out_size = " + std::to_string(out) + "]");
  const int64_t end = read_int_arg(
      kPrefix, args, "end", start, out,
      "[start = " + std::to_string(start) + ", out_size = " + std::to_string(out) + "]");
  if (x.dims[0] > std::numeric_limits<int32_t>::max()) {
    throw InvalidArgument(
        "ragged_gather: x " + x.to_string() + " has more rows than i32 indices can name", "x");
  }
  if (x.dims[0] == 0 && end > start) {
    throw InvalidArgument("ragged_gather: x " + x.to_string() +
                              " has no rows to gather, yet [start, end) = [" +
                              std::to_string(start) + ", " + std::to_string(end) + ") is not empty",
                          "x");
  }
  BoundArgs bound;
  bound.op = std::string(RaggedGatherProblem::kOp);
  bound.args = {
      {"x", x.to_string()}, {"indices", indices.to_string()}, {"start", start}, {"end", end}};
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<RaggedGatherProblem>::inputs(const BoundArgs& args) const {
  return {{"x", args.tensor("x")}, {"indices", args.tensor("indices")}};
}

template <>
std::vector<TensorDecl> ProblemOp<RaggedGatherProblem>::outputs(const BoundArgs& args) const {
  const RaggedGatherProblem p = RaggedGatherProblem::from(args);
  return {{"out", TensorSpec{p.dtype, {p.out, p.h}}}};
}

std::pair<int64_t, int64_t> RaggedGatherOp::defined_range(const BoundArgs& args,
                                                          const TensorDecl&) const {
  const RaggedGatherProblem p = RaggedGatherProblem::from(args);
  return {p.start * p.h, p.end * p.h};
}

template <>
double ProblemOp<RaggedGatherProblem>::flops(const BoundArgs&) const {
  // Copies, no arithmetic: the op is measured in bytes.
  return 0.0;
}

template <>
double ProblemOp<RaggedGatherProblem>::bytes(const BoundArgs& args) const {
  // The gathered rows' indices read; each distinct source row read once at best (no more of
  // them than rows gathered, nor than x has); the gathered rows written.
  const RaggedGatherProblem p = RaggedGatherProblem::from(args);
  const double rows = static_cast<double>(p.end - p.start);
  const double row_bytes = static_cast<double>(p.row_bytes());
  return 4.0 * rows + std::min(rows, static_cast<double>(p.in)) * row_bytes + rows * row_bytes;
}

}  // namespace tokamax
