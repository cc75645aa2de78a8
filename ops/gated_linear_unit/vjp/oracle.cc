// gated_linear_unit_vjp: the float64 oracle of every gradient (blocked, or the plain loop that
// tests it); the error model's derivation is in base_numerics.cc.
//
// Dimensions.
//   M, K, N   as base.h; H [M, 2N] = [dg | dp] and E [M, 2N] its error scale (units of u)
//   W [K, 2N] = [Wg | Wp]; S sampled points
#include "ops/gated_linear_unit/oracle.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/gated_linear_unit/vjp/api.h"

namespace tokamax {
namespace {

constexpr int64_t kChunkElements = int64_t{1} << 25;  // of one f64 operand (256 MiB)

// H's entries of one (row, column n) and their error scales, from the exact gate g, projection
// pr and their magnitudes (the bracket of base_numerics.cc, in units of u).
struct HEntry {
  double dg = 0.0, dp = 0.0, eg = 0.0, ep = 0.0;
};

HEntry h_entry(const GluProblem& p, double d, double g, double pr, double Mg, double Mp, double u) {
  const double nK = static_cast<double>(p.K) + 2.0;
  const double gK = nK * u / (1.0 - nK * u);
  const double L = activation_lipschitz(p.activation);
  const double C2 = activation_curvature(p.activation);
  const double c = kActivationEvalUlps;
  const double a = apply_activation<double>(p.activation, g);
  const double da = activation_derivative<double>(p.activation, g);
  const double eg = gK * Mg, ep = gK * Mp;
  const double step = p.activation == Activation::kRelu && eg >= std::fabs(g) ? 1.0 : 0.0;
  HEntry h;
  h.dg = d * pr * da;
  h.dp = d * a;
  h.eg = (std::fabs(d) *
              (std::fabs(da) * ep +
               (std::fabs(pr) + ep) * (C2 * eg + c * u * (1.0 + std::fabs(g) + eg) + step)) +
          2.0 * u * std::fabs(h.dg)) /
         u;
  h.ep = (std::fabs(d) * (L * eg + c * u * (std::fabs(g) + std::fabs(a) + (1.0 + L) * eg)) +
          u * std::fabs(h.dp)) /
         u;
  // bf16 x and weights: H may be rounded to bf16 before its two products (base_numerics.cc).
  const double uh = glu_vjp_h_roundoff(p);
  h.eg += uh * std::fabs(h.dg) / u;
  h.ep += uh * std::fabs(h.dp) / u;
  return h;
}

// Each point's three sums: value, sum |terms| and the propagated errors sum E |input|.
struct Sums {
  std::vector<double> value, terms, propagated;
  explicit Sums(size_t S) : value(S, 0.0), terms(S, 0.0), propagated(S, 0.0) {}
};

// Which output: dx, or a weight gradient's columns of H (part 2: both, fused).
struct Target {
  bool dx = false;
  int part = -1;
  // The H column j and the contraction row (m for dx, k for a weight) of flat index i.
  int64_t column(const GluProblem& p, int64_t i) const {
    if (dx) return i % p.K;
    return part == 2 ? i % (2 * p.N) : part * p.N + i % p.N;
  }
  int64_t row(const GluProblem& p, int64_t i) const {
    if (dx) return i / p.K;
    return part == 2 ? i / (2 * p.N) : i / p.N;
  }
};

// The oracle's definition: rows of H by plain loops, then each point's sum term by term.
void loop_sums(const GluProblem& p, const TensorMap& inputs, const Target& t,
               std::span<const int64_t> index, double u, Sums& out) {
  const Tensor& x = inputs.find("x")->second;
  const Tensor& dout = inputs.find("dout")->second;
  const GluWeights w = glu_weights(p, inputs);
  const int64_t M = p.M, K = p.K, N = p.N;
  std::unordered_map<int64_t, std::vector<HEntry>> rows;
  auto row_of = [&](int64_t m) -> const std::vector<HEntry>& {
    auto it = rows.find(m);
    if (it != rows.end()) return it->second;
    std::vector<double> g(N, 0.0), pr(N, 0.0), Mg(N, 0.0), Mp(N, 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const double xk = x.get(m * K + k);
      for (int64_t n = 0; n < N; ++n) {
        const double tg = xk * w.get(0, k, n), tp = xk * w.get(1, k, n);
        g[n] += tg;
        pr[n] += tp;
        Mg[n] += std::fabs(tg);
        Mp[n] += std::fabs(tp);
      }
    }
    std::vector<HEntry> h(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n)
      h[n] = h_entry(p, dout.get(m * N + n), g[n], pr[n], Mg[n], Mp[n], u);
    return rows.emplace(m, std::move(h)).first->second;
  };
  auto at = [N](const std::vector<HEntry>& h, int64_t j, bool error) {
    const HEntry& e = h[j % N];
    return j < N ? (error ? e.eg : e.dg) : (error ? e.ep : e.dp);
  };
  for (size_t s = 0; s < index.size(); ++s) {
    if (t.dx) {
      const int64_t m = index[s] / K, k = index[s] % K;
      const std::vector<HEntry>& h = row_of(m);
      for (int64_t j = 0; j < 2 * N; ++j) {
        const double wk = w.get(j < N ? 0 : 1, k, j % N);
        out.value[s] += at(h, j, false) * wk;
        out.propagated[s] += at(h, j, true) * std::fabs(wk);
        out.terms[s] += std::fabs(at(h, j, false) * wk);
      }
    } else {
      const int64_t k = t.row(p, index[s]), j = t.column(p, index[s]);
      for (int64_t m = 0; m < M; ++m) {
        const std::vector<HEntry>& h = row_of(m);
        const double xm = x.get(m * K + k);
        out.value[s] += xm * at(h, j, false);
        out.propagated[s] += std::fabs(xm) * at(h, j, true);
        out.terms[s] += std::fabs(xm * at(h, j, false));
      }
    }
  }
}

// H and E of rows [m0, m0 + rows) (or the listed rows), as [rows, 2N] (transposed: [2N, rows],
// for a contraction over the rows): the forward's products by f64_dot_rows_all, then h_entry.
void h_block(const GluProblem& p, const TensorMap& inputs, const F64Matrix& wg_t,
             const F64Matrix& wp_t, int64_t m0, int64_t rows, std::span<const int64_t> row_index,
             bool transposed, double u, F64Matrix& h, F64Matrix& e) {
  const int64_t K = p.K, N = p.N;
  const F64Matrix xs = to_f64(inputs.at("x"), {m0 * K, K, 1}, rows, K, row_index);
  const F64Matrix d = to_f64(inputs.at("dout"), {m0 * N, N, 1}, rows, N, row_index);
  const int64_t R = xs.rows;
  std::vector<double> g(R * N), Mg(R * N), pr(R * N), Mp(R * N);
  f64_dot_rows_all(xs.rows_view(), wg_t.rows_view(), g.data(), Mg.data(), N);
  f64_dot_rows_all(xs.rows_view(), wp_t.rows_view(), pr.data(), Mp.data(), N);
  for (F64Matrix* m : {&h, &e}) {
    m->rows = transposed ? 2 * N : R;
    m->cols = transposed ? R : 2 * N;
    m->data.assign(static_cast<size_t>(R * 2 * N), 0.0);
  }
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t n = 0; n < N; ++n) {
      const int64_t i = r * N + n;
      const HEntry entry = h_entry(p, d.row(r)[n], g[i], pr[i], Mg[i], Mp[i], u);
      const auto put = [&](F64Matrix& m, int64_t j, double v) {
        (transposed ? m.row(j)[r] : m.row(r)[j]) = v;
      };
      put(h, n, entry.dg);
      put(h, N + n, entry.dp);
      put(e, n, entry.eg);
      put(e, N + n, entry.ep);
    }
  }
}

void blocked_sums(const GluProblem& p, const TensorMap& inputs, const Target& t,
                  std::span<const int64_t> index, double u, Sums& out) {
  const int64_t M = p.M, K = p.K, N = p.N;
  const F64Matrix wg_t = glu_weight_f64(p, inputs, 0, true),
                  wp_t = glu_weight_f64(p, inputs, 1, true);
  const size_t S = index.size();
  if (t.dx) {
    // dx[m, k] = H[m, :] . W[k, :]: the sampled rows' H against W [K, 2N] (and |W| for E).
    const F64Matrix wg = glu_weight_f64(p, inputs, 0, false),
                    wp = glu_weight_f64(p, inputs, 1, false);
    F64Matrix w{std::vector<double>(static_cast<size_t>(K * 2 * N)), K, 2 * N};
    for (int64_t k = 0; k < K; ++k) {
      std::copy(wg.row(k), wg.row(k) + N, w.row(k));
      std::copy(wp.row(k), wp.row(k) + N, w.row(k) + N);
    }
    const F64Matrix w_abs = abs_of(w);
    std::vector<int64_t> rows;
    for (size_t s = 0; s < S; ++s) rows.push_back(index[s] / K);
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    const int64_t chunk = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(2 * N, K));
    for (size_t r0 = 0; r0 < rows.size(); r0 += static_cast<size_t>(chunk)) {
      const std::span<const int64_t> part(rows.data() + r0,
                                          std::min(rows.size() - r0, size_t(chunk)));
      F64Matrix h, e;
      h_block(p, inputs, wg_t, wp_t, 0, 0, part, false, u, h, e);
      std::vector<DotPoint> points;
      std::vector<size_t> at;
      for (size_t s = 0; s < S; ++s) {
        const int64_t m = index[s] / K;
        const auto it = std::lower_bound(part.begin(), part.end(), m);
        if (it == part.end() || *it != m) continue;
        points.push_back({it - part.begin(), index[s] % K});
        at.push_back(s);
      }
      const size_t n = points.size();
      std::vector<double> v(n), mag(n), prop(n);
      f64_dot_rows(h.rows_view(), w.rows_view(), points, v, mag);
      f64_dot_rows(e.rows_view(), w_abs.rows_view(), points, prop, {});
      for (size_t i = 0; i < n; ++i) {
        out.value[at[i]] = v[i];
        out.terms[at[i]] = mag[i];
        out.propagated[at[i]] = prop[i];
      }
    }
    return;
  }
  // A weight gradient dW[k, j] = x[:, k] . H[:, j]: a contraction over every row, in chunks of
  // rows whose partial sums add up: x^T at the sampled k against H^T (and |x|^T against E^T).
  std::vector<int64_t> ks;
  for (size_t s = 0; s < S; ++s) ks.push_back(t.row(p, index[s]));
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  std::vector<DotPoint> points(S);
  for (size_t s = 0; s < S; ++s) {
    points[s] = {std::lower_bound(ks.begin(), ks.end(), t.row(p, index[s])) - ks.begin(),
                 t.column(p, index[s])};
  }
  const int64_t chunk = std::max<int64_t>(1, kChunkElements / std::max<int64_t>({2 * N, K, 1}));
  std::vector<double> value(S), terms(S), propagated(S);
  for (int64_t m0 = 0; m0 < M; m0 += chunk) {
    const int64_t rows = std::min(chunk, M - m0);
    F64Matrix h, e;
    h_block(p, inputs, wg_t, wp_t, m0, rows, {}, true, u, h, e);
    const F64Matrix xt = to_f64(inputs.at("x"), {m0 * K, 1, K}, 0, rows, ks);
    const F64Matrix xt_abs = abs_of(xt);
    f64_dot_rows(xt.rows_view(), h.rows_view(), points, value, terms);
    f64_dot_rows(xt_abs.rows_view(), e.rows_view(), points, propagated, {});
    for (size_t s = 0; s < S; ++s) {
      out.value[s] += value[s];
      out.terms[s] += terms[s];
      out.propagated[s] += propagated[s];
    }
  }
}

double terms_factor(double n, double u) { return n * (1.0 + 2.0 * n * u); }

}  // namespace

OracleSample gated_linear_unit_vjp_oracle(const BoundArgs& args, const TensorMap& inputs,
                                          std::string_view output, std::span<const int64_t> index,
                                          OracleMethod method) {
  const GluProblem p = GluProblem::from(args);
  Target t;
  t.dx = output == "dx";
  if (output == "dweights" && p.fused_weights) t.part = 2;
  if (output == "dgate_weights" && !p.fused_weights) t.part = 0;
  if (output == "dproj_weights" && !p.fused_weights) t.part = 1;
  if (!t.dx && t.part < 0) {
    throw InvalidArgument("gated_linear_unit_vjp has no output '" + std::string(output) + "'");
  }
  const double u = gated_linear_unit_vjp_op().error_model(args).accumulation_roundoff;
  Sums sums(index.size());
  if (method == OracleMethod::kLoop) {
    loop_sums(p, inputs, t, index, u, sums);
  } else {
    blocked_sums(p, inputs, t, index, u, sums);
  }
  const double n = t.dx ? 2.0 * static_cast<double>(p.N) + 1.0 : static_cast<double>(p.M) + 1.0;
  const double floor_term = subnormal_floor(t.dx ? p.x_dtype : p.w_dtype) / u;
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value = std::move(sums.value);
  sample.magnitude.resize(index.size());
  for (size_t s = 0; s < index.size(); ++s) {
    sample.magnitude[s] =
        1.01 * (sums.propagated[s] + terms_factor(n, u) * sums.terms[s]) + floor_term;
  }
  return sample;
}

template <>
OracleSample ProblemOp<GluVjpProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                              std::string_view output,
                                              std::span<const int64_t> index) const {
  return gated_linear_unit_vjp_oracle(args, inputs, output, index, OracleMethod::kBlocked);
}

}  // namespace tokamax
