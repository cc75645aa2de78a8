// top_k: the oracle, each sampled row ranked by a full stable sort of its eligible columns (in
// double, by the float comparison itself with +0.0 above -0.0: independent of the key encoding
// the implementations share).
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/top_k/base.h"

namespace tokamax {
namespace {

float score_at(const Tensor& scores, int64_t flat) {
  return scores.spec().dtype == DType::kI32 ? std::bit_cast<float>(scores.data<int32_t>()[flat])
                                            : scores.data<float>()[flat];
}

}  // namespace

template <>
OracleSample ProblemOp<TopKProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                            std::string_view output,
                                            std::span<const int64_t> index) const {
  if (output != "indices" && output != "scores_bits") {
    throw InvalidArgument("top_k has no output '" + std::string(output) + "'");
  }
  const TopKProblem p = TopKProblem::from(args);
  const Tensor& scores = inputs.at("scores");
  auto lengths = inputs.find("row_lengths");
  const int32_t* row_lengths = lengths == inputs.end() ? nullptr : lengths->second.data<int32_t>();

  // Each touched row's columns in selection order, once.
  std::unordered_map<int64_t, std::vector<int64_t>> ranked;
  auto ranking = [&](int64_t r) -> const std::vector<int64_t>& {
    auto it = ranked.find(r);
    if (it != ranked.end()) return it->second;
    std::vector<int64_t> columns;
    const int64_t len = row_select_length(row_lengths, r, p.n);
    for (int64_t c = 0; c < len; ++c) {
      const double v = score_at(scores, r * p.n + c);
      if (v > -std::numeric_limits<double>::infinity()) columns.push_back(c);
    }
    // Descending in the total order of XLA's top_k: +0.0 above -0.0, otherwise the values.
    std::stable_sort(columns.begin(), columns.end(), [&](int64_t a, int64_t b) {
      const double x = score_at(scores, r * p.n + a), y = score_at(scores, r * p.n + b);
      return x > y || (x == 0.0 && y == 0.0 && !std::signbit(x) && std::signbit(y));
    });
    return ranked.emplace(r, std::move(columns)).first->second;
  };

  const bool bits = output == "scores_bits";
  const int32_t neg_inf_bits = std::bit_cast<int32_t>(-std::numeric_limits<float>::infinity());
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.resize(index.size());
  sample.magnitude.assign(index.size(), 0.0);
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t r = index[s] / p.k, j = index[s] % p.k;
    const std::vector<int64_t>& columns = ranking(r);
    const int64_t column = j < static_cast<int64_t>(columns.size()) ? columns[j] : -1;
    if (!bits) {
      sample.value[s] = static_cast<double>(column);
    } else if (column < 0) {
      sample.value[s] = neg_inf_bits;
    } else {
      sample.value[s] = std::bit_cast<int32_t>(score_at(scores, r * p.n + column));
    }
  }
  return sample;
}

}  // namespace tokamax
