// router_topk: binding, validation, tensors and counts.
#include "ops/router_topk/base.h"

#include <string>

#include "ops/framework/errors.h"

namespace tokamax {

using nlohmann::json;

RouterTopKProblem RouterTopKProblem::from(const BoundArgs& args) {
  RouterTopKProblem p;
  const TensorSpec scores = args.tensor("scores");
  p.T = scores.dims[0];
  p.E = scores.dims[1];
  p.dtype = scores.dtype;
  p.k = args.option("k").get<int64_t>();
  return p;
}

template <>
BoundArgs ProblemOp<RouterTopKProblem>::bind_canonical(const json& args) const {
  check_arg_names("router_topk: ", args, {"scores", "k"});
  const TensorSpec scores = read_tensor_arg(
      "router_topk: ", args, "scores",
      {.shape = "[num_tokens, num_experts]", .example = "f32[8192,256]", .rank = 2});
  if (!is_kernel_float(scores.dtype)) {
    throw InvalidArgument("router_topk: scores must be f32, bf16 or f16, got " + scores.to_string(),
                          "scores");
  }
  const int64_t experts = scores.dims[1];
  const int64_t k = read_int_arg("router_topk: ", args, "k", 1, experts,
                                 "[1, num_experts = " + std::to_string(experts) + "]");
  BoundArgs bound;
  bound.op = std::string(RouterTopKProblem::kOp);
  bound.args = {{"scores", scores.to_string()}, {"k", k}};
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<RouterTopKProblem>::inputs(const BoundArgs& args) const {
  return {{"scores", args.tensor("scores")}};
}

template <>
std::vector<TensorDecl> ProblemOp<RouterTopKProblem>::outputs(const BoundArgs& args) const {
  const RouterTopKProblem p = RouterTopKProblem::from(args);
  return {{"weights", TensorSpec{DType::kF32, {p.T, p.k}}},
          {"indices", TensorSpec{DType::kI32, {p.T, p.k}}}};
}

template <>
double ProblemOp<RouterTopKProblem>::flops(const BoundArgs&) const {
  // Comparisons, not floating-point arithmetic: the op is measured in bytes.
  return 0.0;
}

template <>
double ProblemOp<RouterTopKProblem>::bytes(const BoundArgs& args) const {
  // The scores read once, the weights and indices written once.
  const RouterTopKProblem p = RouterTopKProblem::from(args);
  return static_cast<double>(p.T) *
         (static_cast<double>(p.E) * dtype_size(p.dtype) + 8.0 * static_cast<double>(p.k));
}

}  // namespace tokamax
