// linear_softmax_cross_entropy_loss: seeded inputs, the error model of the float64 oracle
// (oracle.cc, oracle_logits.cc; the reference is in reference.cc).
//
// Dimensions.
//   B      rows of x (tokens), one label each
//   H      hidden size: the contraction extent of the logits x @ w
//   V      vocabulary size: logits per row, classes of the labels
//   z      logits z[i, j] = sum_k x[i, k] w[k, j]
//
// Error model (why the oracle's `magnitude` is not a plain sum of |terms|). An implementation
// that accumulates in f32 (unit roundoff u = 2^-24) makes, per row i:
//   1. logit errors: |dz_ij| <= gamma_{H+1} m_ij with m_ij = sum_k |x_ik w_kj| (a length-H dot
//      product, one more rounding for f32 x f32 products; bf16/f16 products are exact in f32).
//   2. log-sum-exp is 1-Lipschitz in the max norm of its argument (its gradient is a softmax),
//      so the lse error from (1) is at most max_j |dz_ij| <= gamma_{H+1} max_j m_ij; the label
//      logit adds gamma_{H+1} m_i,label.
//   3. the lse arithmetic itself: each term exp(z_j - max) has a relative error of a few u from
//      exp plus u |z_j - max| from the subtraction; t e^-t <= 1/e bounds the weighted sum of the
//      latter by V/e (relative to the sum, which is >= 1), and a blocked online softmax pays the
//      same again for its rescale factors; the sum of V terms and the block merges add at most
//      (V + V/chunk) u. With the log, max + log(sum) and lse - z_label roundings this stays below
//      u (3V + 32 + 3|lse| + |z_label|).
//   (lse, the residual of return_residuals, has the budget of items 2 and 3 without the label
//   logit's parts: gamma_{H+1} max_j m_ij + u (3V + 32 + 3|lse|).)
//   4. sum: the per-row budgets add up, plus gamma_B sum_i |loss_i| for the B-term sum; mean:
//      that over B, plus one rounding of the division.
// ErrorModel's generic bound is gamma(length * u) * magnitude + u_out |value|. We set length = 1
// and u = 2^-24, and the oracle reports magnitude = (budget of 1-4) / u: the generic bound then
// reads gamma_1 / u * budget >= budget, i.e. the budget above, with the f32 output rounding on
// top. No change to ops/framework/numerics.h was needed.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/framework/dtype_dispatch.h"
#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"
#include "ops/linear_softmax_cross_entropy_loss/base.h"

namespace tokamax {
namespace {

// Standard deviation of the generated logits: with x ~ N(0, 1) and w ~ N(0, s^2 / H), z ~ N(0,
// s^2), so a row spans about +-4s = +-12 over a large vocabulary, like a trained LM head's
// logits (a spread of O(1..10), never all equal).
constexpr double kLogitStd = 3.0;

}  // namespace

template <>
TensorMap ProblemOp<LinearSoftmaxCrossEntropyProblem>::make_inputs(const BoundArgs& args,
                                                                   uint64_t seed) const {
  const LinearSoftmaxCrossEntropyProblem p = LinearSoftmaxCrossEntropyProblem::from(args);
  Tensor x = normal_tensor(args.tensor("x"), seed, "x");
  const double w_scale = kLogitStd / std::sqrt(static_cast<double>(std::max<int64_t>(p.H, 1)));
  Tensor w = normal_tensor(args.tensor("w"), seed, "w", w_scale);
  // Uniform classes, with the first and last row pinned to the edge classes 0 and V-1 (the
  // first and last column of w, where chunk boundaries and tails live).
  Tensor labels(args.tensor("labels"));
  int32_t* label = labels.data<int32_t>();
  const uint64_t label_stream = stream_id("labels");
  for (int64_t i = 0; i < p.B; ++i) {
    const auto v =
        static_cast<int64_t>(uniform01(seed, label_stream, i) * static_cast<double>(p.V));
    label[i] = static_cast<int32_t>(std::min(v, p.V - 1));
  }
  if (p.B >= 1) label[0] = 0;
  if (p.B >= 2) label[p.B - 1] = static_cast<int32_t>(p.V - 1);
  // Padding: rows 1.. of a seeded choice get -1 (the edge rows keep their classes).
  const double padded = args.has("padded_labels") ? args.option("padded_labels").get<double>() : 0;
  const uint64_t padding_stream = stream_id("padded_labels");
  for (int64_t i = 1; i + 1 < p.B; ++i) {
    if (uniform01(seed, padding_stream, i) < padded) label[i] = -1;
  }
  TensorMap inputs;
  inputs.emplace("x", std::move(x));
  inputs.emplace("labels", std::move(labels));
  inputs.emplace("w", std::move(w));
  return inputs;
}

template <>
double ProblemOp<LinearSoftmaxCrossEntropyProblem>::oracle_cost_per_output(
    const BoundArgs& args) const {
  const LinearSoftmaxCrossEntropyProblem p = LinearSoftmaxCrossEntropyProblem::from(args);
  const double row = static_cast<double>(std::max<int64_t>(p.H, 1)) * static_cast<double>(p.V);
  return p.reduction == LsceReduction::kNone ? row : row * static_cast<double>(p.B);
}

template <>
ErrorModel ProblemOp<LinearSoftmaxCrossEntropyProblem>::error_model(const BoundArgs&) const {
  // The whole budget is in the oracle's magnitude (see the comment at the top of this file).
  ErrorModel model;
  model.accumulation_roundoff = unit_roundoff(DType::kF32);
  model.accumulation_length = 1.0;
  model.output_roundoff = unit_roundoff(DType::kF32);
  return model;
}

}  // namespace tokamax
