// top_k: the portable reference, a loop over rows with std::partial_sort (what a user writes
// first), and its implementation.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "ops/framework/reference_implementation.h"
#include "ops/top_k/base.h"

namespace tokamax {

void top_k_reference(const TopKProblem& p, const Tensor& scores, const Tensor* row_lengths,
                     Tensor& indices, Tensor* scores_bits) {
  const float* values = static_cast<const float*>(scores.raw());  // f32, or i32 holding its bits
  const int32_t* lengths = row_lengths == nullptr ? nullptr : row_lengths->data<int32_t>();
  const int32_t neg_inf_bits = std::bit_cast<int32_t>(-std::numeric_limits<float>::infinity());
  std::vector<std::pair<int32_t, int64_t>> eligible;  // (key, column)
  for (int64_t r = 0; r < p.b; ++r) {
    const float* row = values + r * p.n;
    const int64_t len = row_select_length(lengths, r, p.n);
    eligible.clear();
    for (int64_t c = 0; c < len; ++c) {
      const int32_t key = row_select_key(row[c], RowSelectRule::kAboveNegInf, 0.0f);
      if (key != kRowSelectIneligible) eligible.emplace_back(key, c);
    }
    const int64_t selected = std::min<int64_t>(p.k, static_cast<int64_t>(eligible.size()));
    std::partial_sort(eligible.begin(), eligible.begin() + selected, eligible.end(),
                      [](const auto& a, const auto& b) {
                        return a.first > b.first || (a.first == b.first && a.second < b.second);
                      });
    int32_t* out = indices.data<int32_t>() + r * p.k;
    int32_t* bits = scores_bits == nullptr ? nullptr : scores_bits->data<int32_t>() + r * p.k;
    for (int64_t j = 0; j < p.k; ++j) {
      const int64_t c = j < selected ? eligible[j].second : -1;
      out[j] = static_cast<int32_t>(c);
      if (bits != nullptr) bits[j] = c < 0 ? neg_inf_bits : std::bit_cast<int32_t>(row[c]);
    }
  }
}

namespace {

void run_reference(const TopKProblem& problem, const TensorMap& inputs, TensorMap& outputs) {
  auto lengths = inputs.find("row_lengths");
  auto bits = outputs.find("scores_bits");
  top_k_reference(problem, inputs.at("scores"),
                  lengths == inputs.end() ? nullptr : &lengths->second, outputs.at("indices"),
                  bits == outputs.end() ? nullptr : &bits->second);
}

}  // namespace

const Implementation& top_k_reference_implementation() {
  static const ReferenceImplementation<TopKProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
