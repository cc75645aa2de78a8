// linear_softmax_cross_entropy_loss: canonical binding, validation, label checks, FLOP/byte counts.
//
// Dimensions.
//   B      rows of x (tokens), one label each
//   H      hidden size: the contraction extent of the logits x @ w
//   V      vocabulary size: logits per row, classes of the labels
#include "ops/linear_softmax_cross_entropy_loss/base.h"

#include <string>
#include <vector>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

constexpr const char* kOp = "linear_softmax_cross_entropy_loss";

std::string prefix() { return std::string(kOp) + ": "; }

TensorSpec bind_tensor(const json& args, const char* name, const char* shape_doc) {
  return read_tensor_arg(prefix(), args, name,
                         {.shape = shape_doc, .example = "bf16[1024,4096]", .rank = 2});
}

}  // namespace

std::string_view lsce_reduction_name(LsceReduction reduction) {
  switch (reduction) {
    case LsceReduction::kNone:
      return "none";
    case LsceReduction::kSum:
      return "sum";
    case LsceReduction::kMean:
      return "mean";
  }
  return "?";
}

LsceReduction parse_lsce_reduction(std::string_view name) {
  if (name == "none") return LsceReduction::kNone;
  if (name == "sum") return LsceReduction::kSum;
  if (name == "mean") return LsceReduction::kMean;
  throw InvalidArgument(
      prefix() + "reduction must be one of none, sum, mean, got '" + std::string(name) + "'",
      "reduction");
}

LinearSoftmaxCrossEntropyProblem LinearSoftmaxCrossEntropyProblem::from(const BoundArgs& args) {
  LinearSoftmaxCrossEntropyProblem p;
  const TensorSpec x = args.tensor("x");
  const TensorSpec w = args.tensor("w");
  p.B = x.dims[0];
  p.H = x.dims[1];
  p.V = w.dims[1];
  p.x_dtype = x.dtype;
  p.w_dtype = w.dtype;
  p.reduction = parse_lsce_reduction(args.option("reduction").get<std::string>());
  p.return_residuals = args.has("return_residuals") && args.option("return_residuals").get<bool>();
  if (args.has("precision")) {
    p.precision = parse_precision(args.option("precision").get<std::string>());
  }
  return p;
}

LinearSoftmaxCrossEntropyProblem LinearSoftmaxCrossEntropyProblem::computed() const {
  const PrecisionPlan plan = precision_plan();
  if (plan.identity()) return *this;
  LinearSoftmaxCrossEntropyProblem p = *this;
  p.H = H * plan.passes();
  p.x_dtype = plan.operand_dtype(true, x_dtype);
  p.w_dtype = plan.operand_dtype(false, w_dtype);
  p.precision = DotPrecision::kDefault;
  return p;
}

TensorMap expand_lsce_precision_operands(const LinearSoftmaxCrossEntropyProblem& problem,
                                         const TensorMap& inputs) {
  const PrecisionPlan plan = problem.precision_plan();
  if (plan.identity()) return inputs;
  TensorMap expanded = inputs;
  if (plan.expands(true)) expanded.at("x") = expand_operand(inputs.at("x"), 1, plan, true);
  if (plan.expands(false)) expanded.at("w") = expand_operand(inputs.at("w"), 0, plan, false);
  return expanded;
}

DType LinearSoftmaxCrossEntropyLossOp::compute_dtype(const BoundArgs& args) const {
  const PrecisionPlan plan = LinearSoftmaxCrossEntropyProblem::from(args).precision_plan();
  return plan.identity() ? Op::compute_dtype(args) : plan.piece_dtype;
}

void write_lsce_loss(const LinearSoftmaxCrossEntropyProblem& p, const double* row_loss,
                     float* out) {
  double total = 0.0;
  for (int64_t i = 0; i < p.B; ++i) {
    if (p.reduction == LsceReduction::kNone) out[i] = static_cast<float>(row_loss[i]);
    total += row_loss[i];
  }
  if (p.reduction == LsceReduction::kSum) out[0] = static_cast<float>(total);
  if (p.reduction == LsceReduction::kMean) out[0] = static_cast<float>(total / p.B);
}

void check_lsce_labels(const LinearSoftmaxCrossEntropyProblem& p, const Tensor& labels) {
  if (labels.dtype() != DType::kI32 || labels.num_elements() != p.B) {
    throw InvalidArgument(prefix() + "labels must be i32[" + std::to_string(p.B) + "], got " +
                              labels.spec().to_string(),
                          "labels");
  }
}

template <>
BoundArgs ProblemOp<LinearSoftmaxCrossEntropyProblem>::bind_canonical(const json& args) const {
  check_arg_names(
      prefix(), args,
      {"x", "labels", "w", "reduction", "padded_labels", "return_residuals", "precision"});
  const TensorSpec x = bind_tensor(args, "x", "[B, H]");
  const TensorSpec w = bind_tensor(args, "w", "[H, V]");
  const int64_t B = x.dims[0], H = x.dims[1], w_H = w.dims[0], V = w.dims[1];
  if (w_H != H) {
    throw InvalidArgument(prefix() + "x has H=" + std::to_string(H) + " but w " + w.to_string() +
                              " has H=" + std::to_string(w_H),
                          "w");
  }
  if (V < 1) {
    throw InvalidArgument(
        prefix() + "w must have at least one class (V >= 1), got " + w.to_string(), "w");
  }
  const TensorSpec labels_spec{DType::kI32, {B}};
  if (args.contains("labels") && !args.at("labels").is_null()) {
    const json& value = args.at("labels");
    TensorSpec given;
    try {
      if (!value.is_string()) throw InvalidArgument("not a string");
      given = parse_tensor_spec(value.get<std::string>());
    } catch (const InvalidArgument&) {
      throw InvalidArgument(
          prefix() + "labels must be a tensor spec like i32[1024], got " + value.dump(), "labels");
    }
    if (!(given == labels_spec)) {
      throw InvalidArgument(prefix() + "labels must be " + labels_spec.to_string() +
                                " (one i32 class per row of x), got " + given.to_string(),
                            "labels");
    }
  }
  std::string reduction = "sum";  // upstream's default
  if (args.contains("reduction") && !args.at("reduction").is_null()) {
    const json& value = args.at("reduction");
    if (!value.is_string()) {
      throw InvalidArgument(
          prefix() + "reduction must be one of none, sum, mean, got " + value.dump(), "reduction");
    }
    reduction = std::string(lsce_reduction_name(parse_lsce_reduction(value.get<std::string>())));
  }
  double padded = 0.0;
  if (args.contains("padded_labels") && !args.at("padded_labels").is_null()) {
    const json& value = args.at("padded_labels");
    if (!value.is_number() || !(value.get<double>() >= 0.0 && value.get<double>() <= 1.0)) {
      throw InvalidArgument(prefix() +
                                "padded_labels must be a fraction in [0, 1] (of rows whose "
                                "generated label is -1), got " +
                                value.dump(),
                            "padded_labels");
    }
    padded = value.get<double>();
  }
  const bool residuals = read_bool_arg(prefix(), args, "return_residuals");
  const DotPrecision precision = bind_precision(args, prefix(), x.dtype, w.dtype);
  BoundArgs bound;
  bound.op = kOp;
  bound.args = {{"x", x.to_string()},
                {"labels", labels_spec.to_string()},
                {"w", w.to_string()},
                {"reduction", reduction}};
  // The default stays out of the canonical form, so cases without padding keep their keys.
  if (padded > 0.0) bound.args["padded_labels"] = padded;
  if (residuals) bound.args["return_residuals"] = true;
  if (precision != DotPrecision::kDefault) {
    bound.args["precision"] = std::string(precision_name(precision));
  }
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<LinearSoftmaxCrossEntropyProblem>::inputs(
    const BoundArgs& args) const {
  return {{"x", args.tensor("x")}, {"labels", args.tensor("labels")}, {"w", args.tensor("w")}};
}

template <>
std::vector<TensorDecl> ProblemOp<LinearSoftmaxCrossEntropyProblem>::outputs(
    const BoundArgs& args) const {
  const LinearSoftmaxCrossEntropyProblem p = LinearSoftmaxCrossEntropyProblem::from(args);
  TensorSpec loss{DType::kF32, {}};
  if (p.reduction == LsceReduction::kNone) loss.dims = {p.B};
  std::vector<TensorDecl> decls = {{"loss", loss}};
  if (p.return_residuals) decls.push_back({"lse", TensorSpec{DType::kF32, {p.B}}});
  return decls;
}

template <>
double ProblemOp<LinearSoftmaxCrossEntropyProblem>::flops(const BoundArgs& args) const {
  // The logits contraction dominates; the softmax adds a max, a subtract, an exp and an add per
  // logit (counted as 4, an exp as one operation).
  const LinearSoftmaxCrossEntropyProblem p = LinearSoftmaxCrossEntropyProblem::from(args);
  const double logits = static_cast<double>(p.B) * static_cast<double>(p.V);
  return 2.0 * logits * static_cast<double>(p.H) + 4.0 * logits;
}

template <>
double ProblemOp<LinearSoftmaxCrossEntropyProblem>::bytes(const BoundArgs& args) const {
  // x, w and labels read once, the loss (and lse) written once: the logits never reach memory.
  const LinearSoftmaxCrossEntropyProblem p = LinearSoftmaxCrossEntropyProblem::from(args);
  return static_cast<double>(p.B) * p.H * dtype_size(p.x_dtype) +
         static_cast<double>(p.H) * p.V * dtype_size(p.w_dtype) + 4.0 * p.B +
         4.0 * static_cast<double>(p.output_elements()) + (p.return_residuals ? 4.0 * p.B : 0.0);
}

}  // namespace tokamax
