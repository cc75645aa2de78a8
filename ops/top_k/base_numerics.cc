// top_k: seeded inputs, the oracle's cost and the error model (exact: the outputs are integers).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ops/framework/random.h"
#include "ops/top_k/base.h"

namespace tokamax {

// Scores ~ N(0, 1) on a grid of 1/64, so that rows hold equal scores (ties, and -0.0 beside +0.0)
// wherever a selection's threshold falls; about 1 in 64 is -inf and 1 in 256 NaN, which are never
// selected. row_lengths spread over [-n/8, 9n/8]: empty rows, partial rows and clipped lengths.
template <>
TensorMap ProblemOp<TopKProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  const TopKProblem p = TopKProblem::from(args);
  TensorMap inputs;
  Tensor scores(args.tensor("scores"));
  const uint64_t values = stream_id("scores"), specials = stream_id("scores_specials");
  const int64_t count = p.b * p.n;
  for (int64_t i = 0; i < count; ++i) {
    const double u = uniform01(seed, specials, static_cast<uint64_t>(i));
    float v = static_cast<float>(std::round(normalish(seed, values, i) * 64.0) / 64.0);
    if (u < 1.0 / 64.0) {
      v = -std::numeric_limits<float>::infinity();
    } else if (u < 1.0 / 64.0 + 1.0 / 256.0) {
      v = std::numeric_limits<float>::quiet_NaN();
    }
    if (p.scores_dtype == DType::kI32) {
      scores.data<int32_t>()[i] = std::bit_cast<int32_t>(v);
    } else {
      scores.data<float>()[i] = v;
    }
  }
  inputs.emplace("scores", std::move(scores));
  if (p.has_row_lengths) {
    Tensor lengths(args.tensor("row_lengths"));
    const uint64_t stream = stream_id("row_lengths");
    const double span = 1.25 * static_cast<double>(p.n) + 1.0;
    for (int64_t r = 0; r < p.b; ++r) {
      const double u = uniform01(seed, stream, static_cast<uint64_t>(r));
      lengths.data<int32_t>()[r] =
          static_cast<int32_t>(std::floor(u * span) - std::floor(0.125 * static_cast<double>(p.n)));
    }
    inputs.emplace("row_lengths", std::move(lengths));
  }
  return inputs;
}

template <>
double ProblemOp<TopKProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  // The oracle sorts a sampled output's row (n log2 n comparisons), shared by the row's k outputs.
  const TopKProblem p = TopKProblem::from(args);
  const double n = static_cast<double>(std::max<int64_t>(p.n, 2));
  return n * std::log2(n) / static_cast<double>(p.k);
}

template <>
ErrorModel ProblemOp<TopKProblem>::error_model(const BoundArgs&) const {
  // Selection does no arithmetic: every implementation must give the oracle's integers exactly.
  return ErrorModel{};
}

}  // namespace tokamax
