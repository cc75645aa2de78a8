// dot_product_attention_vjp: the rows of the exact backward (P, dS and their error terms) that
// the float64 oracle and the generated out / lse inputs read, a head's rows at a time.
//
// Dimensions: as base.h (B, T, t, H, h, D, d; b, hq, r, j); R the rows of one call.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "ops/common/f64_dot.h"
#include "ops/common/f64_matrix.h"
#include "ops/dot_product_attention/base.h"
#include "ops/dot_product_attention/oracle.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// One row (b, hq, r) of the exact backward and its error terms (units of u).
struct VjpRow {
  bool empty = true;
  double lse = -std::numeric_limits<double>::infinity();
  double eP = 0.0;         // relative error of each P_j
  std::vector<double> p;   // [t] softmax weights, 0 where masked
  std::vector<double> ds;  // [t] dS (before the scale)
  std::vector<double> es;  // [t] the bound on dS's error
};

// What the rows need beyond the inputs: u (0 for the generated inputs' rows, which need no
// error terms), out_rounding = u_out / u when out comes as an input rounded to q's dtype (its
// rounding enters Dr = dout . out), and whether dS is wanted (false: P and lse only).
struct VjpRowOptions {
  double u = 0.0;
  double out_rounding = 0.0;
  bool with_cotangent = true;
  OracleMethod method = OracleMethod::kBlocked;
};

// Rows `rows` of head (b, hq). `out`, when given, receives out = P v of each row ([R, d]).
std::vector<VjpRow> attention_vjp_rows(const AttentionProblem& p, const TensorMap& inputs,
                                       const AttentionMasks& masks, int64_t b, int64_t hq,
                                       std::span<const int64_t> rows, const VjpRowOptions& options,
                                       F64Matrix* out = nullptr);

}  // namespace tokamax
