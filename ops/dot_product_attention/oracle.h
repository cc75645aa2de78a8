// dot_product_attention and its VJP: the float64 oracles, by either method of
// ops/common/f64_dot.h (Op::oracle runs kBlocked; the tests compare it with kLoop), and the
// row-by-key dot products both compute first.
//
// Dimensions: as base.h (B, T, t, H, h, D, d; b, hq, r, j; i = hq / g the kv head); R the rows
// of one head asked for, X the contraction extent of a dot product (D or d).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "ops/common/f64_dot.h"
#include "ops/common/f64_matrix.h"
#include "ops/dot_product_attention/base.h"
#include "ops/framework/op.h"
#include "ops/framework/tensor.h"

namespace tokamax {

// The oracle of out or lse (DotProductAttentionOp::oracle with a chosen method).
OracleSample dot_product_attention_oracle(const BoundArgs& args, const TensorMap& inputs,
                                          std::string_view output, std::span<const int64_t> index,
                                          OracleMethod method);

// The oracle of dq, dk, dv or dbias (DotProductAttentionVjpOp::oracle with a chosen method).
OracleSample dot_product_attention_vjp_oracle(const BoundArgs& args, const TensorMap& inputs,
                                              std::string_view output,
                                              std::span<const int64_t> index, OracleMethod method);

// bias and mask as double / bytes, with their broadcast layouts (the oracles read each element
// once per row).
struct AttentionMasks {
  std::vector<double> bias;
  std::vector<uint8_t> mask, dropout;
  AttentionBroadcast bias_at, mask_at, dropout_at;
  // Whether key j is visible from row r of head (b, hq) under the bool mask and the key mask
  // (none: all are; with ranges, p as with_range_mask made it).
  bool keep(const AttentionProblem& p, int64_t b, int64_t hq, int64_t r, int64_t j) const {
    return (!p.mask || mask[mask_at.offset(b, hq, r, j)]) && p.key_visible(b, hq, r, j);
  }
  // The factor the softmax weight of key j from row r carries after dropout: keep / (1 -
  // dropout_rate), 1 without dropout.
  double dropped(const AttentionProblem& p, int64_t b, int64_t hq, int64_t r, int64_t j) const {
    if (!p.dropout_mask) return 1.0;
    return dropout[dropout_at.offset(b, hq, r, j)] ? p.dropout_scale() : 0.0;
  }
  double bias_at_key(const AttentionProblem& p, int64_t b, int64_t hq, int64_t r, int64_t j) const {
    return p.bias ? bias[bias_at.offset(b, hq, r, j)] : 0.0;
  }
};
AttentionMasks load_attention_masks(const AttentionProblem& p, const TensorMap& inputs);

// Row-by-key dot products of head (b, hq): rows[] of `queries` ([*B, T, H, X]: q, or dout)
// against every key of `keys` ([*B, t, h, X]: k, or v) of its kv head,
//   dot[r * t + j] = sum_x queries[b, rows[r], hq, x] keys[b, j, hq / g, x], abs likewise of |.|.
// kLoop: one X-term sum per (row, key) in order; kBlocked: f64_dot_rows_all.
struct KeyDots {
  std::vector<double> dot, abs;
};
KeyDots attention_key_dots(const AttentionProblem& p, const Tensor& queries, const Tensor& keys,
                           int64_t X, int64_t b, int64_t hq, std::span<const int64_t> rows,
                           OracleMethod method);

// Column c of `values` ([*B, t, h, X]: v, or k) over every key j of kv head i, as X rows of t:
// the right-hand side of a product with a [rows, t] matrix of weights (P, dS).
F64Matrix attention_key_columns(const AttentionProblem& p, const Tensor& values, int64_t X,
                                int64_t b, int64_t i);

}  // namespace tokamax
