// ragged_dot_vjp under a rounding precision preset: the passes on pieces (precision.h).
#include "ops/ragged_dot/vjp/precision.h"

#include <algorithm>
#include <vector>

#include "ops/common/cpu_gemm/pack.h"

namespace tokamax {

bool vjp_precision_rounds(const RaggedDotVjpProblem& p) {
  const DotPrecision precision = p.fwd.precision;
  const DType lhs = p.fwd.lhs_dtype, rhs = p.fwd.rhs_dtype, dout = p.dout_dtype;
  return !plan_precision(precision, lhs, rhs).identity() ||
         !plan_precision(precision, dout, rhs).identity() ||
         !plan_precision(precision, lhs, dout).identity();
}

PrecisionPlan vjp_precision_plan(const RaggedDotVjpProblem& p) {
  return plan_precision(p.fwd.precision, DType::kF32, DType::kF32);
}

RaggedDotVjpProblem vjp_computed(const RaggedDotVjpProblem& p) {
  if (!vjp_precision_rounds(p)) return p;
  const DType piece = vjp_precision_plan(p).piece_dtype;
  RaggedDotVjpProblem c = p;
  c.fwd.precision = DotPrecision::kDefault;
  c.fwd.lhs_dtype = piece;
  c.fwd.rhs_dtype = piece;
  c.fwd.out_dtype = piece;  // the forward's output type is dout's
  c.dout_dtype = piece;
  c.dlhs_dtype = DType::kF32;
  c.drhs_dtype = DType::kF32;
  return c;
}

namespace {

// Piece `index` of `source` in the plan's piece type (one pair of the plan: expand_operand's
// vectorized split, with a single block).
Tensor piece_of(const Tensor& source, const PrecisionPlan& plan, int index) {
  PrecisionPlan one = plan;
  one.pairs = {{index, index}};
  return expand_operand(source, source.spec().rank() - 1, one, /*is_lhs=*/true);
}

void add_into(const Tensor& pass, Tensor& sum) {
  const float* from = pass.data<float>();
  float* to = sum.data<float>();
  const int64_t n = sum.num_elements();
  for (int64_t i = 0; i < n; ++i) to[i] += from[i];
}

// The f32 sum into the output's dtype (rounded once, as the kernels store their tiles).
void store(const Tensor& sum, Tensor& out) {
  const int64_t n = sum.num_elements();
  store_rows(sum.data<float>(), n, 1, n, out.dtype(), out.raw(), n);
}

}  // namespace

void run_ragged_dot_vjp(const RaggedDotVjpProblem& p, const TensorMap& inputs, TensorMap& outputs,
                        const RaggedDotVjpRun& run) {
  if (!vjp_precision_rounds(p)) return run(p, inputs, outputs);
  const PrecisionPlan plan = vjp_precision_plan(p);
  const RaggedDotVjpProblem computed = vjp_computed(p);
  int pieces = 1;
  for (const auto& [i, j] : plan.pairs) pieces = std::max({pieces, i + 1, j + 1});
  std::vector<Tensor> lhs, rhs, dout;
  for (int i = 0; i < pieces; ++i) {
    lhs.push_back(piece_of(inputs.at("lhs"), plan, i));
    rhs.push_back(piece_of(inputs.at("rhs"), plan, i));
    dout.push_back(piece_of(inputs.at("dout"), plan, i));
  }
  Tensor& dlhs = outputs.at("dlhs");
  Tensor& drhs = outputs.at("drhs");
  Tensor dlhs_sum(TensorSpec{DType::kF32, dlhs.dims()}),
      drhs_sum(TensorSpec{DType::kF32, drhs.dims()});
  TensorMap pass_inputs = inputs;
  for (const auto& [i, j] : plan.pairs) {
    // dlhs's pair (i, j) = dout_i rhs_j^T; drhs's pair (j, i) = lhs_j^T dout_i.
    pass_inputs["lhs"] = lhs[j];
    pass_inputs["rhs"] = rhs[j];
    pass_inputs["dout"] = dout[i];
    TensorMap pass_outputs;
    pass_outputs.emplace("dlhs", Tensor(TensorSpec{DType::kF32, dlhs.dims()}));
    pass_outputs.emplace("drhs", Tensor(TensorSpec{DType::kF32, drhs.dims()}));
    run(computed, pass_inputs, pass_outputs);
    add_into(pass_outputs.at("dlhs"), dlhs_sum);
    add_into(pass_outputs.at("drhs"), drhs_sum);
  }
  store(dlhs_sum, dlhs);
  store(drhs_sum, drhs);
}

}  // namespace tokamax
