// linear_softmax_cross_entropy_loss(_vjp): the float64 logits the oracles read, chunk by chunk
// of V (no [B, V] array), by either method of ops/common/f64_dot.h, and each row's softmax
// statistics.
//
// Dimensions.
//   B, H, V   as base.h; R the rows asked for, Vc the columns of one chunk
//   z, m      logits z[i, j] = sum_k x[i, k] w[k, j] and magnitudes m[i, j] = sum_k |x w|
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include "ops/common/f64_dot.h"
#include "ops/framework/tensor.h"
#include "ops/linear_softmax_cross_entropy_loss/base.h"

namespace tokamax {

// Called with rows[first .. first + count) and columns [j0, j0 + Vc): z and m [count, Vc].
using LsceLogitVisitor = std::function<void(int64_t first, int64_t count, int64_t j0, int64_t Vc,
                                            const double* z, const double* m)>;

// Every logit of `rows` (row indices of x) exactly once, in any order of chunks. kLoop: one row
// at a time over all of V, each logit summing its H terms in order (the oracle's definition);
// kBlocked: f64_dot_rows_all of the rows against chunks of w^T.
void lsce_logits(const LinearSoftmaxCrossEntropyProblem& p, const TensorMap& inputs,
                 std::span<const int64_t> rows, OracleMethod method, const LsceLogitVisitor& visit);

// One row's statistics over its logits: max and sum of exp(z - max) (merged chunk by chunk, an
// online log-sum-exp), the largest magnitude, and the label's logit and magnitude.
struct LsceRowStats {
  double z_max = -std::numeric_limits<double>::infinity();
  double sum = 0.0;
  double m_max = 0.0;
  double z_label = 0.0, m_label = 0.0;
  double lse() const;
  // Columns [j0, j0 + Vc) of the row.
  void add(int64_t j0, int64_t Vc, const double* z, const double* m, int32_t label);
};

// The statistics of each of `rows`.
std::vector<LsceRowStats> lsce_row_stats(const LinearSoftmaxCrossEntropyProblem& p,
                                         const TensorMap& inputs, std::span<const int64_t> rows,
                                         OracleMethod method);

}  // namespace tokamax
