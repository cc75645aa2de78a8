// gated_linear_unit_vjp: binding (the forward's, plus dout), inputs and outputs, counts.
//
// Dimensions: as base.h (M, K, N).
#include "ops/gated_linear_unit/vjp/base.h"

#include "ops/framework/vjp.h"
#include "ops/gated_linear_unit/api.h"

namespace tokamax {

GluVjpProblem GluVjpProblem::from(const BoundArgs& args) {
  GluVjpProblem p;
  p.fwd = GluProblem::from(args);
  return p;
}

GluWeightGrads glu_weight_grads(const GluProblem& p, TensorMap& outputs) {
  GluWeightGrads w;
  w.dtype = p.w_dtype;
  if (p.fused_weights) {
    char* data = static_cast<char*>(outputs.at("dweights").raw());
    w.gate = data;
    w.proj = data + p.N * static_cast<int64_t>(dtype_size(p.w_dtype));
    w.ld = 2 * p.N;
  } else {
    w.gate = outputs.at("dgate_weights").raw();
    w.proj = outputs.at("dproj_weights").raw();
    w.ld = p.N;
  }
  return w;
}

const Op* GatedLinearUnitVjpOp::primal() const { return &gated_linear_unit_op(); }

template <>
BoundArgs ProblemOp<GluVjpProblem>::bind_canonical(const nlohmann::json& args) const {
  BoundArgs bound = bind_vjp(gated_linear_unit_op(), name(), args, cotangents());
  // A preset that rounds the operands would need the gradient's products expanded each its own
  // way: refused by name until they are, never ignored.
  if (const GluProblem p = GluProblem::from(bound); !p.precision_plan().identity()) {
    throw InvalidArgument(std::string(name()) +
                              ": precision=" + std::string(precision_name(p.precision)) +
                              " is not implemented for the gradient (default, high, highest and "
                              "presets that keep these operands as they are run)",
                          "precision");
  }
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<GluVjpProblem>::inputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = gated_linear_unit_op().inputs(args);
  decls.push_back({"dout", args.tensor("dout")});
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<GluVjpProblem>::outputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = {{"dx", args.tensor("x")}};
  if (args.has("weights")) {
    decls.push_back({"dweights", args.tensor("weights")});
  } else {
    decls.push_back({"dgate_weights", args.tensor("gate_weights")});
    decls.push_back({"dproj_weights", args.tensor("proj_weights")});
  }
  return decls;
}

template <>
double ProblemOp<GluVjpProblem>::flops(const BoundArgs& args) const {
  // The forward's two products again (g and p are not saved), then dx ([M, 2N] x [2N, K]) and
  // dweights ([K, M] x [M, 2N]): six products of M K N multiply-adds.
  const GluProblem p = GluProblem::from(args);
  return 12.0 * static_cast<double>(p.M) * p.K * p.N;
}

template <>
double ProblemOp<GluVjpProblem>::bytes(const BoundArgs& args) const {
  // x, the weights and dout read once; dx and the weight gradients written once.
  const GluProblem p = GluProblem::from(args);
  const double M = static_cast<double>(p.M), K = static_cast<double>(p.K),
               N = static_cast<double>(p.N);
  return 2.0 * M * K * dtype_size(p.x_dtype) + 2.0 * 2.0 * K * N * dtype_size(p.w_dtype) +
         M * N * dtype_size(p.x_dtype);
}

}  // namespace tokamax
