// gated_linear_unit: canonical binding, validation, FLOP/byte counts.
//
// Dimensions.
//   B      leading batch extents of x (*B, any number, possibly none)
//   M      rows of x: the product of B and x's second-to-last extent, flattened
//   K      contraction extent
//   N      output features (weights [K, 2, N]: gate, projection)
#include "ops/gated_linear_unit/base.h"

#include <string>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

TensorSpec bind_tensor(const json& args, const char* name, const char* shape_doc) {
  return read_tensor_arg("gated_linear_unit: ", args, name,
                         {.shape = shape_doc, .example = "bf16[512,384]"});
}

}  // namespace

std::vector<int64_t> GluProblem::out_dims() const {
  std::vector<int64_t> dims = x_dims;
  dims.back() = N;
  return dims;
}

GluProblem GluProblem::from(const BoundArgs& args) {
  GluProblem p;
  const TensorSpec x = args.tensor("x");
  p.fused_weights = args.has("weights");
  const TensorSpec w = args.tensor(p.fused_weights ? "weights" : "gate_weights");
  p.x_dims = x.dims;
  p.K = x.dims.back();
  p.M = 1;
  for (size_t i = 0; i + 1 < x.dims.size(); ++i) p.M *= x.dims[i];
  p.N = w.dims.back();
  p.x_dtype = x.dtype;
  p.w_dtype = w.dtype;
  p.output_dtype = x.dtype;
  p.activation = parse_activation(args.option("activation").get<std::string>());
  if (args.has("precision")) {
    p.precision = parse_precision(args.option("precision").get<std::string>());
  }
  return p;
}

GluProblem GluProblem::computed() const {
  const PrecisionPlan plan = precision_plan();
  if (plan.identity()) return *this;
  GluProblem p = *this;
  p.K = K * plan.passes();
  p.x_dims.back() = p.K;
  p.x_dtype = plan.operand_dtype(true, x_dtype);
  p.w_dtype = plan.operand_dtype(false, w_dtype);
  p.precision = DotPrecision::kDefault;
  return p;
}

TensorMap expand_glu_precision_operands(const GluProblem& problem, const TensorMap& inputs) {
  const PrecisionPlan plan = problem.precision_plan();
  if (plan.identity()) return inputs;
  TensorMap expanded = inputs;
  const Tensor& x = inputs.at("x");
  if (plan.expands(true)) {
    expanded.at("x") = expand_operand(x, static_cast<int>(x.dims().size()) - 1, plan, true);
  }
  if (!plan.expands(false)) return expanded;
  for (const char* name : {"weights", "gate_weights", "proj_weights"}) {
    if (auto it = expanded.find(name); it != expanded.end()) {
      it->second = expand_operand(inputs.at(name), 0, plan, false);
    }
  }
  return expanded;
}

template <>
BoundArgs ProblemOp<GluProblem>::bind_canonical(const json& args) const {
  const std::string op(name());
  check_arg_names(op + ": ", args,
                  {"x", "weights", "gate_weights", "proj_weights", "activation", "precision"});
  const TensorSpec x = bind_tensor(args, "x", "[*B, M, K]");
  if (x.rank() < 2) {
    throw InvalidArgument(op + ": x must have rank >= 2 [*B, M, K], got " + x.to_string(), "x");
  }
  auto present = [&](const char* key) { return args.contains(key) && !args.at(key).is_null(); };
  const bool unfused = present("gate_weights") || present("proj_weights");
  if (unfused && present("weights")) {
    throw InvalidArgument(op + ": give weights [K, 2, N] or gate_weights and proj_weights [K, N], "
                               "not both",
                          "weights");
  }
  auto check_k = [&](const TensorSpec& w, const char* name) {
    if (w.dims[0] != x.dims.back()) {
      throw InvalidArgument(op + ": x has K=" + std::to_string(x.dims.back()) + " but " + name +
                                " " + w.to_string() + " has K=" + std::to_string(w.dims[0]),
                            name);
    }
  };
  TensorSpec w, wg, wp;
  if (unfused) {
    for (const char* name : {"gate_weights", "proj_weights"}) {
      if (!present(name)) {
        throw InvalidArgument(op +
                                  ": unfused weights need both gate_weights and proj_weights "
                                  "[K, N]; " +
                                  name + " is missing",
                              name);
      }
    }
    wg = bind_tensor(args, "gate_weights", "[K, N]");
    wp = bind_tensor(args, "proj_weights", "[K, N]");
    for (const auto& [spec, name] : {std::pair{&wg, "gate_weights"}, {&wp, "proj_weights"}}) {
      if (spec->rank() != 2) {
        throw InvalidArgument(op + ": " + name + " must be [K, N], got " + spec->to_string(), name);
      }
      check_k(*spec, name);
    }
    if (wg.dims != wp.dims || wg.dtype != wp.dtype) {
      throw InvalidArgument(op + ": gate_weights " + wg.to_string() + " and proj_weights " +
                                wp.to_string() + " must have the same shape and dtype",
                            "proj_weights");
    }
  } else {
    w = bind_tensor(args, "weights", "[K, 2, N]");
    if (w.rank() != 3 || w.dims[1] != 2) {
      throw InvalidArgument(
          op + ": weights must be [K, 2, N] (gate, projection), got " + w.to_string(), "weights");
    }
    check_k(w, "weights");
  }
  Activation activation = Activation::kNone;
  if (args.contains("activation") && !args.at("activation").is_null()) {
    const json& value = args.at("activation");
    if (!value.is_string()) {
      throw InvalidArgument(op + ": activation must be a name, got " + value.dump(), "activation");
    }
    try {
      activation = parse_activation(value.get<std::string>());
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(op + ": " + e.what(), "activation");
    }
  }
  const DotPrecision precision =
      bind_precision(args, op + ": ", x.dtype, unfused ? wg.dtype : w.dtype);
  BoundArgs bound;
  bound.op = op;
  bound.args = {{"x", x.to_string()}, {"activation", std::string(activation_name(activation))}};
  // The default stays out of the canonical form, so plain calls keep their cache keys.
  if (precision != DotPrecision::kDefault) {
    bound.args["precision"] = std::string(precision_name(precision));
  }
  if (unfused) {
    bound.args["gate_weights"] = wg.to_string();
    bound.args["proj_weights"] = wp.to_string();
  } else {
    bound.args["weights"] = w.to_string();
  }
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<GluProblem>::inputs(const BoundArgs& args) const {
  if (!args.has("weights")) {
    return {{"x", args.tensor("x")},
            {"gate_weights", args.tensor("gate_weights")},
            {"proj_weights", args.tensor("proj_weights")}};
  }
  return {{"x", args.tensor("x")}, {"weights", args.tensor("weights")}};
}

double GluWeights::get(int j, int64_t k, int64_t n) const {
  const char* base = static_cast<const char*>(j == 0 ? gate : proj);
  const int64_t i = k * ld + n;
  switch (dtype) {
    case DType::kF64:
      return reinterpret_cast<const double*>(base)[i];
    case DType::kF32:
      return reinterpret_cast<const float*>(base)[i];
    case DType::kBF16:
      return bf16_to_float(reinterpret_cast<const bf16*>(base)[i]);
    case DType::kF16:
      return f16_to_float(reinterpret_cast<const f16*>(base)[i]);
    default:
      throw NotImplemented("gated_linear_unit: weights must be float");
  }
}

GluWeights glu_weights(const GluProblem& p, const TensorMap& inputs) {
  GluWeights w;
  w.dtype = p.w_dtype;
  if (p.fused_weights) {
    const char* data = static_cast<const char*>(inputs.at("weights").raw());
    w.gate = data;
    w.proj = data + p.N * static_cast<int64_t>(dtype_size(p.w_dtype));
    w.ld = 2 * p.N;
  } else {
    w.gate = inputs.at("gate_weights").raw();
    w.proj = inputs.at("proj_weights").raw();
    w.ld = p.N;
  }
  return w;
}

template <>
std::vector<TensorDecl> ProblemOp<GluProblem>::outputs(const BoundArgs& args) const {
  const GluProblem p = GluProblem::from(args);
  return {{"out", TensorSpec{p.out_dtype(), p.out_dims()}}};
}

template <>
double ProblemOp<GluProblem>::flops(const BoundArgs& args) const {
  // Two [M, K] x [K, N] products; the activation and the product (O(M N)) are not counted.
  const GluProblem p = GluProblem::from(args);
  return 4.0 * static_cast<double>(p.M) * p.K * p.N;
}

template <>
double ProblemOp<GluProblem>::bytes(const BoundArgs& args) const {
  const GluProblem p = GluProblem::from(args);
  return static_cast<double>(p.M) * p.K * dtype_size(p.x_dtype) +
         2.0 * p.K * p.N * dtype_size(p.w_dtype) +
         static_cast<double>(p.M) * p.N * dtype_size(p.out_dtype());
}

}  // namespace tokamax
