// Oracle comparison, error bounds and output sampling.
#include "ops/framework/numerics.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>
#include <vector>

#include "ops/framework/random.h"

namespace tokamax {

std::string_view disposition_name(Disposition disposition) {
  switch (disposition) {
    case Disposition::kPassed:
      return "passed";
    case Disposition::kFailed:
      return "failed";
    case Disposition::kMistrusted:
      return "mistrusted";
    case Disposition::kUnsupported:
      return "unsupported";
    case Disposition::kSkipped:
      return "skipped";
  }
  return "?";
}

double term_gamma(const ErrorModel& model) {
  // The classical forward bound of a length-n recursive sum is gamma_n * sum |terms| with
  // gamma_n = n*u / (1 - n*u); blocked or pairwise orders only do better. Rounded operands make
  // each term a_k b_k (1 + d) with |d| <= operand_roundoff before it is summed.
  const double n_u = model.accumulation_length * model.accumulation_roundoff;
  return (n_u < 0.5 ? n_u / (1.0 - n_u) : 1.0) + model.operand_roundoff;
}

double error_bound(const ErrorModel& model, double oracle_value, double magnitude) {
  // The output rounding is one more relative error. The absolute floor keeps exact zeros (rows
  // past the group sum) strict without dividing by zero.
  return term_gamma(model) * magnitude + model.output_roundoff * std::fabs(oracle_value) + 1e-300;
}

Comparison compare_to_oracle(const Tensor& output, const OracleSample& oracle,
                             const ErrorModel& model) {
  Comparison result;
  result.sampled = static_cast<int64_t>(oracle.index.size());
  result.total = output.num_elements();
  bool all_zero = true;
  for (size_t s = 0; s < oracle.index.size(); ++s) {
    const double expected = oracle.value[s];
    const double actual = output.get(oracle.index[s]);
    if (expected != 0.0) all_zero = false;
    result.max_abs_oracle = std::max(result.max_abs_oracle, std::fabs(expected));
    if (!std::isfinite(actual) && std::isfinite(expected)) {
      ++result.nonfinite;
      result.worst_ratio = INFINITY;
      result.worst_index = oracle.index[s];
      continue;
    }
    if (!std::isfinite(expected)) {
      // A NaN or infinite oracle value (an op that defines one, e.g. router_topk's NaN weights)
      // is matched exactly: the same infinity, or a NaN for a NaN.
      const bool same = std::isnan(expected) ? std::isnan(actual) : actual == expected;
      if (!same) {
        ++result.violations;
        result.worst_ratio = INFINITY;
        result.worst_index = oracle.index[s];
      }
      continue;
    }
    const double error = std::fabs(actual - expected);
    const double bound = error_bound(model, expected, oracle.magnitude[s]);
    result.max_abs_error = std::max(result.max_abs_error, error);
    if (expected != 0.0) {
      result.max_rel_error = std::max(result.max_rel_error, error / std::fabs(expected));
    }
    const double ratio = error / bound;
    if (ratio > 1.0) ++result.violations;
    if (result.worst_index < 0 || ratio > result.worst_ratio) {
      result.worst_ratio = ratio;
      result.worst_index = oracle.index[s];
      result.bound = bound;
    }
  }
  result.degenerate_oracle = all_zero;
  return result;
}

double normwise_rel_error(const Comparison& comparison) {
  return comparison.max_abs_oracle > 0 ? comparison.max_abs_error / comparison.max_abs_oracle : 0.0;
}

Disposition judge(const Comparison& comparison) {
  if (comparison.nonfinite > 0 || comparison.violations > 0) return Disposition::kFailed;
  // An all-zero oracle cannot tell a correct kernel from one that writes nothing.
  if (comparison.degenerate_oracle) return Disposition::kMistrusted;
  return Disposition::kPassed;
}

std::vector<int64_t> sample_indices(int64_t total, int64_t max_samples, uint64_t seed) {
  std::vector<int64_t> index;
  if (total <= 0) return index;
  if (total <= max_samples) {
    index.resize(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) index[i] = i;
    return index;
  }
  // The first and last element, then distinct draws in draw order until there are enough. A
  // bitmap of the outputs when it is small next to the sample (8 bytes per sample at most),
  // else a hash set: either holds millions of samples in a fraction of a second, where an
  // ordered set took seconds (the oracle itself is that fast).
  const uint64_t stream = stream_id("oracle_sample");
  const int64_t wanted = std::max<int64_t>(max_samples, 2);
  auto draw = [&](uint64_t d) {
    return static_cast<int64_t>(uniform01(seed, stream, d) * static_cast<double>(total));
  };
  if (total / 64 <= wanted) {
    std::vector<uint64_t> chosen(static_cast<size_t>(total / 64 + 1), 0);
    auto insert = [&](int64_t i) {
      uint64_t& word = chosen[static_cast<size_t>(i / 64)];
      const uint64_t bit = uint64_t{1} << (i % 64);
      const bool fresh = (word & bit) == 0;
      word |= bit;
      return fresh;
    };
    int64_t count = static_cast<int64_t>(insert(0)) + static_cast<int64_t>(insert(total - 1));
    for (uint64_t d = 0; count < wanted; ++d) count += insert(draw(d)) ? 1 : 0;
    index.reserve(static_cast<size_t>(count));
    for (int64_t i = 0; i < total; ++i) {
      if (chosen[static_cast<size_t>(i / 64)] >> (i % 64) & 1) index.push_back(i);
    }
    return index;
  }
  std::unordered_set<int64_t> chosen = {0, total - 1};
  chosen.reserve(static_cast<size_t>(2 * wanted));
  for (uint64_t d = 0; static_cast<int64_t>(chosen.size()) < wanted; ++d) chosen.insert(draw(d));
  index.assign(chosen.begin(), chosen.end());
  std::sort(index.begin(), index.end());
  return index;
}

OracleSet sample_oracle(const Op& op, const BoundArgs& args, const TensorMap& inputs, double budget,
                        uint64_t seed) {
  OracleSet oracle;
  const double cost = std::max(op.oracle_cost_per_output(args), 1.0);
  const double affordable = budget / cost;
  for (const TensorDecl& decl : op.outputs(args)) {
    const auto [first, last] = op.defined_range(args, decl);
    const int64_t total = last - first;
    const int64_t max_samples =
        static_cast<double>(total) <= affordable
            ? total
            : static_cast<int64_t>(
                  std::clamp(affordable, 64.0, static_cast<double>(kMaxOracleSamples)));
    std::vector<int64_t> index = sample_indices(total, max_samples, seed);
    for (int64_t& i : index) i += first;
    oracle[decl.name] = op.oracle(args, inputs, decl.name, index);
  }
  return oracle;
}

}  // namespace tokamax
