// triangle_multiplication_vjp: the oracle's tracked arithmetic (oracle.cc runs it): values in
// double with each one's error magnitude in units of the f32 roundoff u, by the rules of
// base_numerics.cc: contractions on f64_dot_rows, layer norms forward and backward, sigmoid.
//
// Dimensions.
//   R, Q, K   a contraction's rows of A, rows of B and depth (A [R, K], B [Q, K] -> [R, Q])
//   n         a normalized row's length
#pragma once

#include <cstdint>
#include <vector>

#include "ops/common/f64_dot.h"
#include "ops/framework/tensor.h"

namespace tokamax::triangle_vjp_oracle {

constexpr double kU = 0x1p-24;  // f32's unit roundoff: the magnitudes' unit
constexpr double kSigmoidSlope = 0.25;

// n' = gamma_n / u: the rounding error of a sum of n terms in any order, per unit of sum |terms|.
double counted(double n);

double sigmoid_of(double z);

// A row-major [rows, cols] matrix of values and error magnitudes; `e` empty: exact.
struct Tracked {
  int64_t rows = 0, cols = 0;
  std::vector<double> v, e;
  Tracked() = default;
  Tracked(int64_t r, int64_t c, bool exact = false)
      : rows(r),
        cols(c),
        v(static_cast<size_t>(r * c), 0.0),
        e(exact ? 0 : static_cast<size_t>(r * c), 0.0) {}
  double err(int64_t i) const { return e.empty() ? 0.0 : e[i]; }
};

Tracked transposed(const Tracked& m);

// Row `r` of a channel-major array as an N x N matrix (a channel's plane).
Tracked plane(const Tracked& m, int64_t r, int64_t N);

// The three sums of a contraction out[i, j] = sum_k A[i, k] B[j, k]: its value, the errors its
// operands carry in (sum |A| E_B + E_A |B|) and sum |A B| (the scale of its own rounding).
struct Sums {
  std::vector<double> value, propagated, terms;
  explicit Sums(size_t n = 0) : value(n, 0.0), propagated(n, 0.0), terms(n, 0.0) {}
  // value and magnitude of element i for a sum of n terms.
  double magnitude(size_t i, double n) const { return propagated[i] + counted(n) * terms[i]; }
};

// A [R, K] with B [Q, K] into `sums` [R, Q] (added to what it holds).
void contract(const Tracked& A, const Tracked& B, Sums& sums);

// A product of depth K as a tracked matrix.
Tracked product(const Tracked& A, const Tracked& B);

// One row of a layer norm: y = (x - mean) r (before the scale), its errors, r and r's error.
struct NormRow {
  std::vector<double> y, ey;
  double r = 0.0, er = 0.0;
};

NormRow norm_forward(const double* x, const double* ex, int64_t n, double epsilon);

// The norm's scaled output y s + o into out / eout.
void norm_output(const NormRow& row, const std::vector<double>& scale,
                 const std::vector<double>& offset, double* out, double* eout);

// The norm's gradient for the cotangent dy (errors edy) into dx / edx; dy y and dy added to the
// scale's and offset's sums.
void norm_backward(const NormRow& row, const std::vector<double>& scale, const double* dy,
                   const double* edy, double* dx, double* edx, Sums& dscale, Sums& doffset);

// sigmoid(z) for z with error ez: value, error, sigmoid'(z) and its error.
struct Gate {
  double s, es, ds, eds;
};
Gate gate_of(double z, double ez);

// Every element of `t` in double.
std::vector<double> values_of(const Tensor& t);

}  // namespace tokamax::triangle_vjp_oracle
