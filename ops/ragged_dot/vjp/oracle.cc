// ragged_dot_vjp: the float64 oracle of dlhs and drhs (blocked, or the plain loop that tests
// it), each point's value and its error magnitude (the error model is in base_numerics.cc).
//
// Dimensions: as base.h (G, M, K, N; rows_g the rows of group g); S sampled points.
#include "ops/ragged_dot/oracle.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/common/f64_matrix.h"
#include "ops/framework/errors.h"
#include "ops/framework/numerics.h"
#include "ops/ragged_dot/vjp/api.h"
#include "ops/ragged_dot/vjp/precision.h"

namespace tokamax {
namespace {

// Elements of one f64 operand converted at once (256 MiB).
constexpr int64_t kChunkElements = int64_t{1} << 25;

struct Sums {
  std::vector<double> value, magnitude;
  std::vector<int64_t> terms;  // the point's term count (0: outside the forward's output)
  explicit Sums(size_t S) : value(S, 0.0), magnitude(S, 0.0), terms(S, 0) {}
};

// The oracle's definition: each gradient element's sum, term by term.
void loop_sums(const RaggedDotProblem& p, const TensorMap& inputs, bool dlhs,
               std::span<const int64_t> index, Sums& out) {
  const Tensor& lhs = inputs.find("lhs")->second;
  const Tensor& rhs = inputs.find("rhs")->second;
  const Tensor& dout = inputs.find("dout")->second;
  const int64_t K = p.K, N = p.N;
  for (size_t s = 0; s < index.size(); ++s) {
    double value = 0.0, magnitude = 0.0;
    if (dlhs) {
      const int64_t row = index[s] / K, k = index[s] % K;
      if (row < p.first_row() || row >= p.rows()) continue;  // no forward output: zero
      const int64_t g = p.group_of(row);
      for (int64_t n = 0; n < N; ++n) {
        const double t = dout.get(row * N + n) * rhs.get((g * K + k) * N + n);
        value += t;
        magnitude += std::fabs(t);
      }
      out.terms[s] = N;
    } else {
      const int64_t g = index[s] / (K * N), k = (index[s] / N) % K, n = index[s] % N;
      for (int64_t row = p.group_starts[g]; row < p.group_starts[g + 1]; ++row) {
        const double t = lhs.get(row * K + k) * dout.get(row * N + n);
        value += t;
        magnitude += std::fabs(t);
      }
      out.terms[s] = p.group_sizes[g];
    }
    out.value[s] = value;
    out.magnitude[s] = magnitude;
  }
}

// dlhs[row, k] = dout[row, :] . rhs[g, k, :]: the group's sampled dout rows against rhs[g]'s K
// rows (both N-contiguous as stored).
void blocked_dlhs(const RaggedDotProblem& p, const TensorMap& inputs,
                  std::span<const int64_t> index, Sums& out) {
  const Tensor& rhs = inputs.find("rhs")->second;
  const Tensor& dout = inputs.find("dout")->second;
  const int64_t K = p.K, N = p.N;
  std::vector<std::vector<size_t>> by_group(static_cast<size_t>(p.G));
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t row = index[s] / K;
    if (p.owns(row)) by_group[p.group_of(row)].push_back(s);
  }
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(N, 1));
  for (int64_t g = 0; g < p.G; ++g) {
    std::vector<size_t>& samples = by_group[g];
    if (samples.empty()) continue;
    std::stable_sort(samples.begin(), samples.end(),
                     [&](size_t x, size_t y) { return index[x] / K < index[y] / K; });
    const F64Matrix w = to_f64(rhs, {g * K * N, N, 1}, K, N);
    for (size_t begin = 0; begin < samples.size();) {
      std::vector<int64_t> rows;
      std::vector<DotPoint> points;
      size_t end = begin;
      for (; end < samples.size(); ++end) {
        const int64_t row = index[samples[end]] / K;
        if (rows.empty() || rows.back() != row) {
          if (static_cast<int64_t>(rows.size()) == chunk_rows) break;
          rows.push_back(row);
        }
        points.push_back({static_cast<int64_t>(rows.size()) - 1, index[samples[end]] % K});
      }
      const F64Matrix d = to_f64(dout, {0, N, 1}, 0, N, rows);
      std::vector<double> value(points.size()), magnitude(points.size());
      f64_dot_rows(d.rows_view(), w.rows_view(), points, value, magnitude);
      for (size_t i = 0; i < points.size(); ++i) {
        const size_t s = samples[begin + i];
        out.value[s] = value[i];
        out.magnitude[s] = magnitude[i];
        out.terms[s] = N;
      }
      begin = end;
    }
  }
}

// drhs[g, k, n] = lhs_g[:, k] . dout_g[:, n]: a contraction over the group's rows, so both
// operands are transposed copies (lhs_g^T at the sampled k, dout_g^T), chunk by chunk of rows,
// the chunks' partial sums added.
void blocked_drhs(const RaggedDotProblem& p, const TensorMap& inputs,
                  std::span<const int64_t> index, Sums& out) {
  const Tensor& lhs = inputs.find("lhs")->second;
  const Tensor& dout = inputs.find("dout")->second;
  const int64_t K = p.K, N = p.N;
  std::vector<std::vector<size_t>> by_group(static_cast<size_t>(p.G));
  for (size_t s = 0; s < index.size(); ++s) by_group[index[s] / (K * N)].push_back(s);
  const int64_t chunk = std::max<int64_t>(1, kChunkElements / std::max<int64_t>({K, N, 1}));
  for (int64_t g = 0; g < p.G; ++g) {
    const std::vector<size_t>& samples = by_group[g];
    if (samples.empty()) continue;
    for (size_t s : samples) out.terms[s] = p.group_sizes[g];
    // The sampled k (rows of lhs_g^T), each once.
    std::vector<int64_t> ks;
    ks.reserve(samples.size());
    for (size_t s : samples) ks.push_back(index[s] / N % K);
    std::sort(ks.begin(), ks.end());
    ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
    std::vector<DotPoint> points;
    for (size_t s : samples) {
      const int64_t k = index[s] / N % K;
      points.push_back({std::lower_bound(ks.begin(), ks.end(), k) - ks.begin(), index[s] % N});
    }
    std::vector<double> value(points.size()), magnitude(points.size());
    for (int64_t r0 = p.group_starts[g]; r0 < p.group_starts[g + 1]; r0 += chunk) {
      const int64_t rows = std::min(chunk, p.group_starts[g + 1] - r0);
      const F64Matrix a = to_f64(lhs, {r0 * K, 1, K}, 0, rows, ks);
      const F64Matrix b = to_f64(dout, {r0 * N, 1, N}, N, rows);
      f64_dot_rows(a.rows_view(), b.rows_view(), points, value, magnitude);
      for (size_t i = 0; i < points.size(); ++i) {
        out.value[samples[i]] += value[i];
        out.magnitude[samples[i]] += magnitude[i];
      }
    }
  }
}

}  // namespace

OracleSample ragged_dot_vjp_oracle(const BoundArgs& args, const TensorMap& inputs,
                                   std::string_view output, std::span<const int64_t> index,
                                   OracleMethod method) {
  if (output != "dlhs" && output != "drhs") {
    throw InvalidArgument("ragged_dot_vjp has no output '" + std::string(output) + "'");
  }
  const RaggedDotVjpProblem vp = RaggedDotVjpProblem::from(args);
  const RaggedDotProblem& p = vp.fwd;
  const bool dlhs = output == "dlhs";
  Sums sums(index.size());
  if (method == OracleMethod::kLoop) {
    loop_sums(p, inputs, dlhs, index, sums);
  } else if (dlhs) {
    blocked_dlhs(p, inputs, index, sums);
  } else {
    blocked_drhs(p, inputs, index, sums);
  }
  // (n + 1) (1 + 2 (n + 1) u): the per-point factor of the error model (base_numerics.cc).
  const ErrorModel model = ragged_dot_vjp_op().error_model(args);
  const double u = model.accumulation_roundoff;
  auto factor = [u](double n) {
    const double terms = n + 1.0;
    return terms * (1.0 + 2.0 * terms * u);
  };
  // A rounding preset (precision.h): P passes of n terms each, summed (P n terms in all),
  // and each term off by the pieces' relative error r once: r sum |terms| joins the magnitude
  // scaled by 1 / gamma, since the bound is gamma * magnitude.
  double passes = 1.0, r_over_gamma = 0.0;
  if (vjp_precision_rounds(vp)) {
    const PrecisionPlan plan = vjp_precision_plan(vp);
    passes = static_cast<double>(plan.passes());
    r_over_gamma = plan.operand_roundoff / term_gamma(model);
  }
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value = std::move(sums.value);
  sample.magnitude.resize(index.size());
  for (size_t s = 0; s < index.size(); ++s) {
    const double n = passes * static_cast<double>(sums.terms[s]);
    sample.magnitude[s] = (factor(n) + r_over_gamma) * sums.magnitude[s];
  }
  return sample;
}

template <>
OracleSample ProblemOp<RaggedDotVjpProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                                    std::string_view output,
                                                    std::span<const int64_t> index) const {
  return ragged_dot_vjp_oracle(args, inputs, output, index, OracleMethod::kBlocked);
}

}  // namespace tokamax
