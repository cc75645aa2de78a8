// top_k: binding, validation, tensors and counts.
#include "ops/top_k/base.h"

#include <string>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

constexpr const char* kPrefix = "top_k: ";

}  // namespace

TopKProblem TopKProblem::from(const BoundArgs& args) {
  TopKProblem p;
  const TensorSpec scores = args.tensor("scores");
  p.b = scores.dims[0];
  p.n = scores.dims[1];
  p.scores_dtype = scores.dtype;
  p.k = args.option("k").get<int64_t>();
  p.has_row_lengths = args.has("row_lengths");
  p.return_scores = args.has("return_scores") && args.option("return_scores").get<bool>();
  return p;
}

template <>
BoundArgs ProblemOp<TopKProblem>::bind_canonical(const json& args) const {
  check_arg_names(kPrefix, args, {"scores", "k", "row_lengths", "return_scores"});
  const TensorSpec scores = read_tensor_arg(
      kPrefix, args, "scores",
      {.shape = "[b, n]", .example = "f32[64,10240]", .rank = 2, .float_only = false});
  if (scores.dtype != DType::kF32 && scores.dtype != DType::kI32) {
    throw InvalidArgument(
        "top_k: scores must be f32, or i32 holding f32 bits, got " + scores.to_string(), "scores");
  }
  const int64_t n = scores.dims[1];
  const int64_t k = read_int_arg(kPrefix, args, "k", 1, n, "[1, n = " + std::to_string(n) + "]");
  BoundArgs bound;
  bound.op = std::string(TopKProblem::kOp);
  bound.args = {{"scores", scores.to_string()}, {"k", k}};
  if (args.contains("row_lengths") && !args.at("row_lengths").is_null()) {
    const TensorSpec lengths =
        read_tensor_arg(kPrefix, args, "row_lengths",
                        {.shape = "[b]", .example = "i32[64]", .rank = 1, .float_only = false});
    if (lengths.dtype != DType::kI32 || lengths.dims[0] != scores.dims[0]) {
      throw InvalidArgument("top_k: row_lengths must be i32[b] = i32[" +
                                std::to_string(scores.dims[0]) + "] (scores' rows), got " +
                                lengths.to_string(),
                            "row_lengths");
    }
    bound.args["row_lengths"] = lengths.to_string();
  }
  // The default stays out of the canonical form (one cache key per selection).
  if (read_bool_arg(kPrefix, args, "return_scores")) bound.args["return_scores"] = true;
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<TopKProblem>::inputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = {{"scores", args.tensor("scores")}};
  if (args.has("row_lengths")) decls.push_back({"row_lengths", args.tensor("row_lengths")});
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<TopKProblem>::outputs(const BoundArgs& args) const {
  const TopKProblem p = TopKProblem::from(args);
  const TensorSpec selected{DType::kI32, {p.b, p.k}};
  std::vector<TensorDecl> decls = {{"indices", selected}};
  if (p.return_scores) decls.push_back({"scores_bits", selected});
  return decls;
}

template <>
double ProblemOp<TopKProblem>::flops(const BoundArgs&) const {
  // Comparisons, not floating-point arithmetic: the op is measured in bytes.
  return 0.0;
}

template <>
double ProblemOp<TopKProblem>::bytes(const BoundArgs& args) const {
  // scores and row_lengths read once, the selection written once.
  const TopKProblem p = TopKProblem::from(args);
  const double rows = static_cast<double>(p.b);
  return 4.0 * rows * static_cast<double>(p.n) + (p.has_row_lengths ? 4.0 * rows : 0.0) +
         4.0 * rows * static_cast<double>(p.k) * (p.return_scores ? 2.0 : 1.0);
}

}  // namespace tokamax
