// router_topk: seeded inputs, the oracle's cost and the error model (exact: the weights are
// copies of scores, the indices integers).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/framework/random.h"
#include "ops/router_topk/base.h"

namespace tokamax {

// Scores ~ N(0, 1) on a grid of 1/64 (equal scores wherever the k-th falls), in the scores' dtype;
// about 1 in 64 is -inf, 1 in 256 NaN and 1 in 256 -FLT_MAX (all clamped to the floor), and one
// row in 16 holds no real score at all (NaN weights).
template <>
TensorMap ProblemOp<RouterTopKProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  const RouterTopKProblem p = RouterTopKProblem::from(args);
  Tensor scores(args.tensor("scores"));
  const uint64_t values = stream_id("scores"), specials = stream_id("scores_specials");
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t t = 0; t < p.T; ++t) {
    const bool no_real_score = t % 16 == 7;
    for (int64_t e = 0; e < p.E; ++e) {
      const int64_t i = t * p.E + e;
      const double u = uniform01(seed, specials, static_cast<uint64_t>(i));
      double v = std::round(normalish(seed, values, static_cast<uint64_t>(i)) * 64.0) / 64.0;
      if (no_real_score) {
        v = u < 0.5 ? -inf : std::nan("");
      } else if (u < 1.0 / 64.0) {
        v = -inf;
      } else if (u < 1.0 / 64.0 + 1.0 / 256.0) {
        v = std::nan("");
      } else if (u < 1.0 / 64.0 + 2.0 / 256.0) {
        v = -std::numeric_limits<float>::max();
      }
      scores.set(i, v);
    }
  }
  TensorMap inputs;
  inputs.emplace("scores", std::move(scores));
  return inputs;
}

template <>
double ProblemOp<RouterTopKProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  // The oracle sorts a sampled output's row (E log2 E comparisons), shared by the row's k outputs.
  const RouterTopKProblem p = RouterTopKProblem::from(args);
  const double E = static_cast<double>(std::max<int64_t>(p.E, 2));
  return E * std::log2(E) / static_cast<double>(p.k);
}

template <>
ErrorModel ProblemOp<RouterTopKProblem>::error_model(const BoundArgs&) const {
  // Selection does no arithmetic: the weights are the scores themselves (as f32), the indices
  // integers; every implementation must give the oracle's values exactly (NaN where it has NaN).
  return ErrorModel{};
}

}  // namespace tokamax
