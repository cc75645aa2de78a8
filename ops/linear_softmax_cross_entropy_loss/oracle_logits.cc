// linear_softmax_cross_entropy_loss(_vjp): the oracles' float64 logits, by the plain loop or by
// f64_dot_rows_all per chunk of V, and the rows' online softmax statistics.
//
// Dimensions: as oracle_logits.h (B, H, V, R, Vc).
#include "ops/linear_softmax_cross_entropy_loss/oracle_logits.h"

#include <algorithm>
#include <cmath>

#include "ops/common/f64_matrix.h"
#include "ops/framework/dtype_dispatch.h"

namespace tokamax {
namespace {

// Columns of one chunk (w^T chunk: Vc H doubles; logits: R Vc) and the rows of x converted at
// once (at most 2^25 doubles: 256 MiB).
constexpr int64_t kChunkColumns = 2048;
constexpr int64_t kChunkElements = int64_t{1} << 25;

void loop_logits(const LinearSoftmaxCrossEntropyProblem& p, const TensorMap& inputs,
                 std::span<const int64_t> rows, const LsceLogitVisitor& visit) {
  const int64_t H = p.H, V = p.V;
  std::vector<double> z(static_cast<size_t>(V)), m(static_cast<size_t>(V));
  dispatch_float(p.x_dtype, [&](auto x_type) {
    using X = decltype(x_type);
    dispatch_float(p.w_dtype, [&](auto w_type) {
      using W = decltype(w_type);
      const X* x = inputs.at("x").data<X>();
      const W* w = inputs.at("w").data<W>();
      for (size_t r = 0; r < rows.size(); ++r) {
        const int64_t i = rows[r];
        std::fill(z.begin(), z.end(), 0.0);
        std::fill(m.begin(), m.end(), 0.0);
        for (int64_t k = 0; k < H; ++k) {
          const double a = to_double(x[i * H + k]);
          const W* w_row = w + k * V;
          for (int64_t j = 0; j < V; ++j) {
            const double term = a * to_double(w_row[j]);
            z[j] += term;
            m[j] += std::fabs(term);
          }
        }
        visit(static_cast<int64_t>(r), 1, 0, V, z.data(), m.data());
      }
    });
  });
}

void blocked_logits(const LinearSoftmaxCrossEntropyProblem& p, const TensorMap& inputs,
                    std::span<const int64_t> rows, const LsceLogitVisitor& visit) {
  const int64_t H = p.H, V = p.V, R = static_cast<int64_t>(rows.size());
  const int64_t chunk_rows = std::max<int64_t>(
      1, std::min(kChunkElements / std::max<int64_t>(H, 1), kChunkElements / kChunkColumns));
  for (int64_t r0 = 0; r0 < R; r0 += chunk_rows) {
    const int64_t count = std::min(chunk_rows, R - r0);
    const F64Matrix x = to_f64(inputs.at("x"), {0, H, 1}, 0, H, rows.subspan(r0, count));
    std::vector<double> z, m;
    for (int64_t j0 = 0; j0 < V; j0 += kChunkColumns) {
      const int64_t Vc = std::min(kChunkColumns, V - j0);
      // w^T [Vc, H]: element (j, k) is w[k, j0 + j].
      const F64Matrix wt = to_f64(inputs.at("w"), {j0, 1, V}, Vc, H);
      z.resize(static_cast<size_t>(count * Vc));
      m.resize(z.size());
      f64_dot_rows_all(x.rows_view(), wt.rows_view(), z.data(), m.data(), Vc);
      visit(r0, count, j0, Vc, z.data(), m.data());
    }
  }
}

}  // namespace

void lsce_logits(const LinearSoftmaxCrossEntropyProblem& p, const TensorMap& inputs,
                 std::span<const int64_t> rows, OracleMethod method,
                 const LsceLogitVisitor& visit) {
  if (method == OracleMethod::kLoop) {
    loop_logits(p, inputs, rows, visit);
  } else {
    blocked_logits(p, inputs, rows, visit);
  }
}

double LsceRowStats::lse() const { return z_max + std::log(sum); }

void LsceRowStats::add(int64_t j0, int64_t Vc, const double* z, const double* m, int32_t label) {
  if (Vc <= 0) return;
  const double chunk_max = *std::max_element(z, z + Vc);
  double chunk_sum = 0.0;
  for (int64_t j = 0; j < Vc; ++j) chunk_sum += std::exp(z[j] - chunk_max);
  // The first chunk: sum = chunk_sum exactly (0 * exp(-inf) = 0), as a single pass computes it.
  if (chunk_max > z_max) {
    sum = sum * std::exp(z_max - chunk_max) + chunk_sum;
    z_max = chunk_max;
  } else {
    sum += chunk_sum * std::exp(chunk_max - z_max);
  }
  m_max = std::max(m_max, *std::max_element(m, m + Vc));
  if (label >= j0 && label < j0 + Vc) {
    z_label = z[label - j0];
    m_label = m[label - j0];
  }
}

std::vector<LsceRowStats> lsce_row_stats(const LinearSoftmaxCrossEntropyProblem& p,
                                         const TensorMap& inputs, std::span<const int64_t> rows,
                                         OracleMethod method) {
  const int32_t* label = inputs.at("labels").data<int32_t>();
  std::vector<LsceRowStats> stats(rows.size());
  lsce_logits(
      p, inputs, rows, method,
      [&](int64_t first, int64_t count, int64_t j0, int64_t Vc, const double* z, const double* m) {
        for (int64_t r = 0; r < count; ++r) {
          stats[first + r].add(j0, Vc, z + r * Vc, m + r * Vc, label[rows[first + r]]);
        }
      });
  return stats;
}

}  // namespace tokamax
