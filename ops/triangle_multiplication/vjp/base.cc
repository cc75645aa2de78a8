// triangle_multiplication_vjp: binding (the forward's, plus dout), inputs and outputs, counts.
//
// Dimensions: as base.h.
#include "ops/triangle_multiplication/vjp/base.h"

#include "ops/framework/vjp.h"
#include "ops/triangle_multiplication/api.h"

namespace tokamax {

TriangleVjpProblem TriangleVjpProblem::from(const BoundArgs& args) {
  return {TriangleMultiplicationProblem::from(args)};
}

const Op* TriangleMultiplicationVjpOp::primal() const { return &triangle_multiplication_op(); }

template <>
BoundArgs ProblemOp<TriangleVjpProblem>::bind_canonical(const nlohmann::json& args) const {
  return bind_vjp(triangle_multiplication_op(), name(), args, {"dout"});
}

template <>
std::vector<TensorDecl> ProblemOp<TriangleVjpProblem>::inputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = triangle_multiplication_op().inputs(args);
  decls.push_back({"dout", args.tensor("dout")});
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<TriangleVjpProblem>::outputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = {{"dx", args.tensor("x")}};
  for (const char* name : kTriangleWeights) decls.push_back({vjp_name(name), args.tensor(name)});
  return decls;
}

template <>
double ProblemOp<TriangleVjpProblem>::flops(const BoundArgs& args) const {
  // The forward again (its stages are not saved), then two triangle products (dL, dR), da and
  // the input weights' gradient (each [P, W] x [W, C]), db and projection_out's gradient (each
  // [P, D] x [D, H]).
  const TriangleMultiplicationProblem p = TriangleMultiplicationProblem::from(args);
  const double P = static_cast<double>(p.positions()), N = static_cast<double>(p.N);
  const double W = 4.0 * p.H + p.D;
  return triangle_multiplication_op().flops(args) + 4.0 * p.H * N * N * N + 4.0 * P * W * p.C +
         4.0 * P * p.D * p.H;
}

template <>
double ProblemOp<TriangleVjpProblem>::bytes(const BoundArgs& args) const {
  // The forward's inputs and dout read once; dx and the weight gradients written once.
  const TriangleMultiplicationProblem p = TriangleMultiplicationProblem::from(args);
  double total = static_cast<double>(p.positions()) *
                 (2.0 * p.C * dtype_size(p.x_dtype) + 1.0 + p.D * dtype_size(p.x_dtype));
  for (const char* name : kTriangleWeights) {
    total += 2.0 * static_cast<double>(args.tensor(name).size_bytes());
  }
  return total;
}

}  // namespace tokamax
