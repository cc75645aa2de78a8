// Selecting the k largest scores of each row of a [b, n] matrix on CPU: the engine of the
// selection ops (top_k, router_topk). Each row by threshold select (small k) or radix select
// (large k), rows in parallel tasks; both order the scores by one signed integer key per score.
//
// Dimensions.
//   b      rows
//   n      scores per row
//   k      selected per row, 1 <= k <= n
//   len    a row's eligible prefix (row_lengths), n without
#pragma once

#include <bit>
#include <cstdint>

#include "ops/common/row_select_config.h"
#include "ops/framework/dtype.h"

namespace tokamax {

// Which scores a row may select, and how they compare.
enum class RowSelectRule {
  // Scores > -inf in the row's prefix [0, len) (NaN never is): top_k.
  kAboveNegInf,
  // Every score, NaN and every score <= floor counting as floor: router_topk.
  kClampToFloor,
};

struct RowSelectProblem {
  int64_t b = 0, n = 0, k = 1;
  DType dtype = DType::kF32;  // of the scores: f32, bf16 or f16 (compared as f32)
  RowSelectRule rule = RowSelectRule::kAboveNegInf;
  float floor = 0.0f;                    // kClampToFloor
  const int32_t* row_lengths = nullptr;  // kAboveNegInf: [b] or null (every row n long)
};

// The key of an ineligible score, below every eligible key.
inline constexpr int32_t kRowSelectIneligible = INT32_MIN;

// A score's selection key: a larger key is a larger score (equal keys are equal scores), an
// ineligible score has kRowSelectIneligible. -0.0 ranks below +0.0 under kAboveNegInf (the total
// order of XLA's top_k, which upstream's top_k follows) and equals it under kClampToFloor
// (upstream's router compares with ==).
inline int32_t row_select_key(float score, RowSelectRule rule, float floor) {
  if (rule == RowSelectRule::kClampToFloor) {
    if (!(score > floor)) score = floor;
    score += 0.0f;  // -0.0 + 0.0 = +0.0
  } else if (!(score > -__builtin_inff())) {
    return kRowSelectIneligible;
  }
  const int32_t bits = std::bit_cast<int32_t>(score);
  return bits ^ ((bits >> 31) & 0x7fffffff);
}

// A row's eligible prefix: clip(row_lengths[row], 0, n), or n without row_lengths (null).
inline int64_t row_select_length(const int32_t* row_lengths, int64_t row, int64_t n) {
  if (row_lengths == nullptr) return n;
  const int64_t len = row_lengths[row];
  return len < 0 ? 0 : (len > n ? n : len);
}

// columns[r, j]: the column of row r's j-th largest eligible score (descending, equal scores in
// ascending column order), -1 past the eligible count; values[r, j], when given, that score as
// f32 (as read, not clamped), -inf past the eligible count.
void row_select_cpu(const RowSelectProblem& problem, const RowSelectConfig& config,
                    // Inputs.
                    const void* scores,  // [b, n] of problem.dtype
                    // Outputs.
                    int32_t* columns,          // [b, k]
                    float* values = nullptr);  // [b, k] or null

}  // namespace tokamax
