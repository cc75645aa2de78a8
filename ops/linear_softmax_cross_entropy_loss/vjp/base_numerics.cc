// linear_softmax_cross_entropy_loss_vjp: seeded inputs, the error model of the float64 oracle of
// dx and dw (oracle.cc; the reference is in reference.cc).
//
// Dimensions.
//   B, H, V      as base.h
//   z, p         logits z[b, j] = sum_k x[b, k] w[k, j] and p = softmax over j
//   m            logit magnitudes m[b, j] = sum_k |x[b, k] w[k, j]|
//
// Error model. An implementation that accumulates in f32 (u = 2^-24) and forms dz in f32 makes,
// for every logit (b, j):
//   1. the logit error |dz_bj| <= gamma_{H+1} m_bj and the log-sum-exp error
//      L_b = gamma_{H+1} max_j m_bj + u (3V + 32 + 3 |lse_b|): items 1-3 of the forward's model
//      (base_numerics.cc), whichever way the implementation recomputes lse_b.
//   2. p_bj = exp(z_bj - lse_b): relative error eps_bj = gamma_{H+1} m_bj + L_b + u (|z_bj -
//      lse_b| + 8) to first order (the two errors of 1, the subtraction's rounding and a few
//      ulps of exp); |dp| <= p expm1(eps) holds without the first-order approximation.
//   3. dz_bj = c_b (p_bj - [j = label_b]): c_b's own rounding (the mean's division), the
//      subtraction and the scaling add 3u |p - onehot| <= 3u (p + onehot), so
//      e_bj = |c_b| (p expm1(eps) + 3u (p + onehot)). Where x and w are both 16-bit, a
//      kernel may round dz to that type before its products (a mixed-precision backward feeds
//      the matmuls in the compute type: the oneDNN composite, cpu's native_dot): u_16 (|dz| +
//      e) more, u_16 the coarser of the two.
//   4. the contractions, products rounded once and summed in any order in f32:
//        dx[b, h] = sum_j dz_bj w[h, j]   err <= sum_j e_bj |w_hj|
//                                                + gamma_{V+1} sum_j (|dz_bj| + e_bj) |w_hj|
//        dw[h, j] = sum_b x[b, h] dz_bj   err <= sum_b e_bj |x_bh|
//                                                + gamma_{B+1} sum_b (|dz_bj| + e_bj) |x_bh|
//   5. one rounding to the output's dtype (x's for dx, w's for dw): u_out (|value| + budget),
//      plus half the subnormal spacing of that dtype (f16's 2^-24 spacing is reached by dw
//      entries of tiny rows; a relative bound alone fails them).
// The two outputs have different term counts and output dtypes while ErrorModel has one length
// and one output rounding, so as in the forward (and ragged_dot_vjp) the model is length 1,
// u = 2^-24, output_roundoff 0, and each sampled point's magnitude is its whole budget (1-5) / u:
// the generic bound gamma_1 / u * budget >= budget is then exactly this budget.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"
#include "ops/framework/vjp.h"
#include "ops/linear_softmax_cross_entropy_loss/api.h"
#include "ops/linear_softmax_cross_entropy_loss/oracle_logits.h"
#include "ops/linear_softmax_cross_entropy_loss/vjp/base.h"

namespace tokamax {

template <>
TensorMap ProblemOp<LinearSoftmaxCrossEntropyVjpProblem>::make_inputs(const BoundArgs& args,
                                                                      uint64_t seed) const {
  // The forward's inputs (logits spanning about +-12, edge classes pinned, padding) and a
  // cotangent ~ N(0, 1): a loss scale of O(1), per row for reduction none. lse, when asked for,
  // exactly as the forward defines it (every row's, in f64 by the oracle's blocked logits,
  // rounded once to f32).
  const LinearSoftmaxCrossEntropyLossOp& fwd = linear_softmax_cross_entropy_loss_op();
  BoundArgs forward_args = primal_args(fwd, args, cotangents());
  forward_args.args.erase("lse");
  TensorMap inputs = fwd.make_inputs(forward_args, seed);
  inputs.emplace("dloss", normal_tensor(args.tensor("dloss"), seed, "dloss"));
  if (args.has("lse")) {
    const LinearSoftmaxCrossEntropyProblem p = LinearSoftmaxCrossEntropyProblem::from(args);
    std::vector<int64_t> rows(static_cast<size_t>(p.B));
    for (int64_t b = 0; b < p.B; ++b) rows[b] = b;
    const std::vector<LsceRowStats> stats = lsce_row_stats(p, inputs, rows, OracleMethod::kBlocked);
    Tensor lse(args.tensor("lse"));
    for (int64_t b = 0; b < p.B; ++b) lse.set(b, stats[b].lse());
    inputs.emplace("lse", std::move(lse));
  }
  return inputs;
}

template <>
double ProblemOp<LinearSoftmaxCrossEntropyVjpProblem>::oracle_cost_per_output(
    const BoundArgs& args) const {
  // dx: a row's logits (H V) shared by the row's sampled elements, then V; dw: B logits of H
  // terms each. The row statistics (B H V in all for dw) are paid once per call.
  const LinearSoftmaxCrossEntropyProblem p = LinearSoftmaxCrossEntropyProblem::from(args);
  const double H = static_cast<double>(std::max<int64_t>(p.H, 1));
  return std::max({H * static_cast<double>(p.V), 2.0 * H * static_cast<double>(p.B), 1.0});
}

template <>
ErrorModel ProblemOp<LinearSoftmaxCrossEntropyVjpProblem>::error_model(const BoundArgs&) const {
  // The whole budget, output rounding included, is in the oracle's magnitude (see the top of
  // this file).
  ErrorModel model;
  model.accumulation_roundoff = 0x1p-24;  // f32's unit roundoff
  model.accumulation_length = 1.0;
  model.output_roundoff = 0.0;
  return model;
}

}  // namespace tokamax
