// triangle_multiplication_vjp: binding (the forward's, plus dout), inputs and outputs, counts.
//
// Dimensions: as base.h.
#include "ops/triangle_multiplication/vjp/base.h"

#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/vjp.h"
#include "ops/triangle_multiplication/api.h"

namespace tokamax {

TriangleVjpProblem TriangleVjpProblem::from(const BoundArgs& args) {
  return {TriangleMultiplicationProblem::from(args)};
}

void store_triangle_weight_grads(const TriangleMultiplicationProblem& p,
                                 const TriangleWeightSums& sums, TensorMap& outputs) {
  const int64_t C = p.C, H = p.H, D = p.D, W = 4 * H + D;
  auto put = [&](const char* name, const float* acc, int64_t rows, int64_t cols, int64_t ld) {
    Tensor& t = outputs.at(vjp_name(name));
    dispatch_float(t.dtype(), [&](auto type) {
      using T = decltype(type);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          t.data<T>()[r * cols + c] = from_double<T>(static_cast<double>(acc[r * ld + c]));
        }
      }
    });
  };
  put("gate_in_weights", sums.w_in, C, 2 * H, W);
  put("projection_in_weights", sums.w_in + 2 * H, C, 2 * H, W);
  put("gate_out_weights", sums.w_in + 4 * H, C, D, W);
  put("projection_out_weights", sums.w_out, H, D, D);
  put("layernorm_in_scale", sums.in_scale, 1, C, C);
  put("layernorm_in_offset", sums.in_offset, 1, C, C);
  put("layernorm_out_scale", sums.out_scale, 1, H, H);
  put("layernorm_out_offset", sums.out_offset, 1, H, H);
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
