// triangle_multiplication_vjp: the oracle's tracked arithmetic (oracle_rules.h).
#include "ops/triangle_multiplication/vjp/oracle_rules.h"

#include <algorithm>
#include <cmath>

#include "ops/common/activation.h"

namespace tokamax::triangle_vjp_oracle {
namespace {

F64Rows rows_of(const std::vector<double>& data, int64_t rows, int64_t cols) {
  return {data.data(), rows, cols, cols};
}

std::vector<double> absolute(const std::vector<double>& v) {
  std::vector<double> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(v[i]);
  return a;
}

}  // namespace

double counted(double n) { return n / (1.0 - n * kU); }

double sigmoid_of(double z) { return 1.0 / (1.0 + std::exp(-z)); }

Tracked transposed(const Tracked& m) {
  Tracked t(m.cols, m.rows, m.e.empty());
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t c = 0; c < m.cols; ++c) {
      t.v[c * m.rows + r] = m.v[r * m.cols + c];
      if (!m.e.empty()) t.e[c * m.rows + r] = m.e[r * m.cols + c];
    }
  }
  return t;
}

Tracked plane(const Tracked& m, int64_t r, int64_t N) {
  Tracked t(N, N);
  std::copy_n(m.v.begin() + r * m.cols, N * N, t.v.begin());
  std::copy_n(m.e.begin() + r * m.cols, N * N, t.e.begin());
  return t;
}

void contract(const Tracked& A, const Tracked& B, Sums& sums) {
  const int64_t R = A.rows, Q = B.rows, K = A.cols;
  const size_t n = static_cast<size_t>(R * Q);
  std::vector<double> value(n), terms(n), carried(n);
  f64_dot_rows_all(rows_of(A.v, R, K), rows_of(B.v, Q, K), value.data(), terms.data(), Q);
  for (size_t i = 0; i < n; ++i) {
    sums.value[i] += value[i];
    sums.terms[i] += terms[i];
  }
  if (!B.e.empty()) {
    f64_dot_rows_all(rows_of(absolute(A.v), R, K), rows_of(B.e, Q, K), carried.data(), nullptr, Q);
    for (size_t i = 0; i < n; ++i) sums.propagated[i] += carried[i];
  }
  if (!A.e.empty()) {
    f64_dot_rows_all(rows_of(A.e, R, K), rows_of(absolute(B.v), Q, K), carried.data(), nullptr, Q);
    for (size_t i = 0; i < n; ++i) sums.propagated[i] += carried[i];
  }
}

Tracked product(const Tracked& A, const Tracked& B) {
  Sums sums(static_cast<size_t>(A.rows * B.rows));
  contract(A, B, sums);
  Tracked out(A.rows, B.rows);
  for (size_t i = 0; i < out.v.size(); ++i) {
    out.v[i] = sums.value[i];
    out.e[i] = sums.magnitude(i, static_cast<double>(A.cols));
  }
  return out;
}

NormRow norm_forward(const double* x, const double* ex, int64_t n, double epsilon) {
  double mean = 0.0, abs_sum = 0.0, e_sum = 0.0;
  for (int64_t c = 0; c < n; ++c) {
    mean += x[c];
    abs_sum += std::fabs(x[c]);
    e_sum += ex[c];
  }
  const double dn = static_cast<double>(n);
  mean /= dn;
  const double e_mean = (e_sum + counted(dn) * abs_sum) / dn + std::fabs(mean);
  double var = 0.0, e_var = 0.0;
  std::vector<double> ed(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) {
    const double d = x[c] - mean;
    ed[c] = ex[c] + e_mean + std::fabs(d);
    var += d * d;
    e_var += 2.0 * std::fabs(d) * ed[c] + counted(dn) * d * d;
  }
  var /= dn;
  e_var = e_var / dn + var;
  NormRow row;
  row.r = 1.0 / std::sqrt(var + epsilon);
  row.er = row.r * (e_var / (2.0 * (var + epsilon)) + 3.0);  // + epsilon, sqrt, divide
  row.y.resize(static_cast<size_t>(n));
  row.ey.resize(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) {
    const double d = x[c] - mean;
    row.y[c] = d * row.r;
    row.ey[c] = row.r * ed[c] + std::fabs(d) * row.er + std::fabs(row.y[c]);
  }
  return row;
}

void norm_output(const NormRow& row, const std::vector<double>& scale,
                 const std::vector<double>& offset, double* out, double* eout) {
  for (size_t c = 0; c < row.y.size(); ++c) {
    const double ys = row.y[c] * scale[c];
    out[c] = ys + offset[c];
    eout[c] = std::fabs(scale[c]) * row.ey[c] + std::fabs(ys) + std::fabs(out[c]);
  }
}

void norm_backward(const NormRow& row, const std::vector<double>& scale, const double* dy,
                   const double* edy, double* dx, double* edx, Sums& dscale, Sums& doffset) {
  const size_t n = row.y.size();
  const double dn = static_cast<double>(n);
  std::vector<double> g(n), eg(n);
  double s1 = 0.0, a1 = 0.0, e1 = 0.0, s2 = 0.0, a2 = 0.0, e2 = 0.0;
  for (size_t c = 0; c < n; ++c) {
    g[c] = dy[c] * scale[c];
    eg[c] = std::fabs(scale[c]) * edy[c] + std::fabs(g[c]);
    s1 += g[c];
    a1 += std::fabs(g[c]);
    e1 += eg[c];
    s2 += g[c] * row.y[c];
    a2 += std::fabs(g[c] * row.y[c]);
    e2 += std::fabs(g[c]) * row.ey[c] + eg[c] * std::fabs(row.y[c]);
    dscale.value[c] += dy[c] * row.y[c];
    dscale.propagated[c] += std::fabs(dy[c]) * row.ey[c] + edy[c] * std::fabs(row.y[c]);
    dscale.terms[c] += std::fabs(dy[c] * row.y[c]);
    doffset.value[c] += dy[c];
    doffset.propagated[c] += edy[c];
    doffset.terms[c] += std::fabs(dy[c]);
  }
  const double m1 = s1 / dn, m2 = s2 / dn;
  const double em1 = (e1 + counted(dn) * a1) / dn + std::fabs(m1);
  const double em2 = (e2 + counted(dn) * a2) / dn + std::fabs(m2);
  for (size_t c = 0; c < n; ++c) {
    const double ym = row.y[c] * m2;
    const double t = g[c] - m1 - ym;
    const double et = eg[c] + em1 + std::fabs(row.y[c]) * em2 + row.ey[c] * std::fabs(m2) +
                      std::fabs(ym) +
                      counted(2.0) * (std::fabs(g[c]) + std::fabs(m1) + std::fabs(ym));
    dx[c] = row.r * t;
    edx[c] = row.r * et + row.er * std::fabs(t) + std::fabs(dx[c]);
  }
}

Gate gate_of(double z, double ez) {
  Gate g;
  g.s = sigmoid_of(z);
  g.es = kSigmoidSlope * ez + kActivationEvalUlps * (std::fabs(z) + g.s);
  g.ds = g.s * (1.0 - g.s);
  g.eds = std::fabs(1.0 - 2.0 * g.s) * g.es + 3.0;  // 1 - s, the product, or s - s^2
  return g;
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = t.get(i);
  return v;
}

}  // namespace tokamax::triangle_vjp_oracle
