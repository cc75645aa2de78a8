// Numerics: comparing an implementation's output with the float64 oracle under a sound bound.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ops/framework/op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

enum class Disposition { kPassed, kFailed, kMistrusted, kUnsupported, kSkipped };
std::string_view disposition_name(Disposition disposition);

struct Comparison {
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;   // pointwise, over oracle values != 0 (large near zeros)
  double max_abs_oracle = 0.0;  // max |oracle value| over the samples
  double bound = 0.0;           // the error bound at the worst point (largest error / bound)
  double worst_ratio = 0.0;     // max over samples of |error| / bound; > 1 fails
  int64_t worst_index = -1;     // flat output index of the worst point
  int64_t violations = 0;       // samples whose error exceeds the bound
  int64_t nonfinite = 0;        // NaN / Inf outputs where the oracle is finite
  int64_t sampled = 0;
  int64_t total = 0;
  bool degenerate_oracle = false;  // every sampled oracle value is zero: nothing to check
};

// The relative error of a sum of terms in the model: gamma_n = n u / (1 - n u) of the
// accumulation (n = accumulation_length) plus the operands' rounding (operand_roundoff).
double term_gamma(const ErrorModel& model);
// Per-point bound: term_gamma * magnitude + u_out * |oracle|, plus the smallest normal of the
// output dtype's scale so that exact zeros compare cleanly.
double error_bound(const ErrorModel& model, double oracle_value, double magnitude);

// max_abs_error / max_abs_oracle: the error relative to the output's scale (0 when the oracle is
// all zero), what verify's table shows as the relative error.
double normwise_rel_error(const Comparison& comparison);

Comparison compare_to_oracle(const Tensor& output, const OracleSample& oracle,
                             const ErrorModel& model);

// passed / failed / mistrusted from a comparison (unsupported and skipped are decided earlier).
Disposition judge(const Comparison& comparison);

// Flat indices to check: all of them when total <= max_samples, otherwise a deterministic sample
// (seeded, sorted, always including the first and last element).
std::vector<int64_t> sample_indices(int64_t total, int64_t max_samples, uint64_t seed);

// The default budget of verify and tune (--oracle-budget): float64 multiply-adds of a case's full
// oracle. The blocked oracles (ops/common/f64_dot.h) run a few times 1e10 a second on two cores,
// and a sampled one costs at most about what a full oracle of the budget would (scattered points
// run several times slower per multiply-add but number budget / cost), so a case costs seconds
// of oracle at most; 2048^3 (8.6e9) is checked at every output (measured:
// docs/measurement_log.md, "f64 oracle rate").
inline constexpr double kDefaultOracleBudget = 1e10;
// At most this many outputs of one tensor are sampled when the full oracle exceeds the budget
// (ops of few multiply-adds per output would otherwise ask for tens of millions: the oracle's
// bookkeeping is ~100 bytes a point). A budget that covers the full oracle checks every output.
inline constexpr int64_t kMaxOracleSamples = int64_t{1} << 22;

// The oracle of every output of a case (of its Op::defined_range), sampled once the full oracle
// would cost more than `budget` float64 multiply-adds (same sample for every implementation):
// budget / cost outputs, at least 64 and at most kMaxOracleSamples.
using OracleSet = std::map<std::string, OracleSample, std::less<>>;
OracleSet sample_oracle(const Op& op, const BoundArgs& args, const TensorMap& inputs, double budget,
                        uint64_t seed);

}  // namespace tokamax
