// ragged_dot_vjp: binding (the forward's, plus dout), the plain-product restriction, counts.
//
// Dimensions: as base.h (G, M, K, N; rows = sum(group_sizes)).
#include "ops/ragged_dot/vjp/base.h"

#include <algorithm>
#include <string>

#include "ops/framework/errors.h"
#include "ops/framework/vjp.h"
#include "ops/ragged_dot/api.h"

namespace tokamax {

int64_t RaggedDotVjpProblem::max_group_rows() const {
  int64_t rows = 0;
  for (int64_t size : fwd.group_sizes) rows = std::max(rows, size);
  return rows;
}

RaggedDotVjpProblem RaggedDotVjpProblem::from(const BoundArgs& args) {
  RaggedDotVjpProblem p;
  p.fwd = RaggedDotProblem::from(args);
  p.dout_dtype = args.tensor("dout").dtype;
  p.dlhs_dtype = p.fwd.lhs_dtype;
  p.drhs_dtype = p.fwd.rhs_dtype;
  return p;
}

const Op* RaggedDotVjpOp::primal() const { return &ragged_dot_op(); }

template <>
BoundArgs ProblemOp<RaggedDotVjpProblem>::bind_canonical(const nlohmann::json& args) const {
  BoundArgs bound = bind_vjp(ragged_dot_op(), name(), args, cotangents());
  // The gradient of the epilogue (bias, activations) and of quantized weights is not this op's:
  // refuse them by name rather than differentiate a different function.
  for (const char* key :
       {"rhs_bias", "activation", "fuse_gateup_activation", "rhs_scale", "maybe_quantize_lhs",
        "zero_initialize", "ragged_dot_dimension_numbers"}) {
    if (bound.has(key)) {
      throw InvalidArgument("ragged_dot_vjp: " + std::string(key) +
                                " is not differentiated here: the VJP is of the plain grouped "
                                "matmul (lhs, rhs, group_sizes, group_offset, "
                                "preferred_element_type; the default dimension numbers)",
                            key);
    }
  }
  // A preset applies to both products (precision.h), so dout must be able to take it too.
  const RaggedDotVjpProblem p = RaggedDotVjpProblem::from(bound);
  (void)plan_precision(p.fwd.precision, p.dout_dtype, p.fwd.rhs_dtype);
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<RaggedDotVjpProblem>::inputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = ragged_dot_op().inputs(args);
  decls.push_back({"dout", args.tensor("dout")});
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<RaggedDotVjpProblem>::outputs(const BoundArgs& args) const {
  return {{"dlhs", args.tensor("lhs")}, {"drhs", args.tensor("rhs")}};
}

template <>
double ProblemOp<RaggedDotVjpProblem>::flops(const BoundArgs& args) const {
  // Two products of the forward's size over the owned rows: dout rhs^T and lhs^T dout.
  const RaggedDotProblem p = RaggedDotProblem::from(args);
  return 4.0 * static_cast<double>(p.owned_rows()) * static_cast<double>(p.K) *
         static_cast<double>(p.N);
}

template <>
double ProblemOp<RaggedDotVjpProblem>::bytes(const BoundArgs& args) const {
  // lhs, rhs and dout read once, dlhs and drhs written once.
  const RaggedDotVjpProblem p = RaggedDotVjpProblem::from(args);
  const double M = static_cast<double>(p.fwd.M), K = static_cast<double>(p.fwd.K),
               N = static_cast<double>(p.fwd.N), G = static_cast<double>(p.fwd.G);
  return M * K * 2.0 * dtype_size(p.fwd.lhs_dtype) + G * K * N * 2.0 * dtype_size(p.fwd.rhs_dtype) +
         M * N * dtype_size(p.dout_dtype);
}

}  // namespace tokamax
