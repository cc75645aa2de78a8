// dot_product_attention: the float64 oracle of out and lse: each requested row's logits from its
// q . k dot products (blocked or the plain loop), its softmax, and P v at the requested columns.
//
// Dimensions.
//   *B     batch dimensions, B = prod(*B); b the flattened batch index
//   T, t   query and key/value positions; r a query row, j a key
//   H, h   query and key/value heads, g = H / h; hq a query head, i = hq / g its kv head
//   D, d   q/k and v head dimensions; c an output column
//   R      the requested rows of one head
#include "ops/dot_product_attention/oracle.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "ops/dot_product_attention/range_mask.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Rows of one head whose t-long rows (logits, P) are held at once: at most 2^20 doubles (8 MiB)
// each, buffers the heap reuses from chunk to chunk.
constexpr int64_t kChunkElements = int64_t{1} << 20;

// One row of the oracle: exact (double) logits of the rounded inputs and the quantities its
// error bound needs.
struct OracleRow {
  std::vector<double> p;     // [t] softmax weights, 0 where masked
  double logit_error = 0.0;  // Delta: max over visible keys of the bound on |logit error| / u
  double logit_range = 0.0;  // R: max - min of the visible logits
  double lse = -kInf;        // log sum_j exp(logit_j)
  double sum = 0.0;          // sum_j exp(logit_j - max): the unnormalized output's factor
  bool empty = true;
};

// Row r of head (b, hq) from its dot products with every key (dot, abs: t each).
OracleRow oracle_row(const AttentionProblem& p, const AttentionMasks& in, int64_t b, int64_t hq,
                     int64_t r, const double* dot, const double* abs_dot) {
  OracleRow row;
  row.p.assign(static_cast<size_t>(p.t), 0.0);
  std::vector<double> logit(static_cast<size_t>(p.t), -kInf);
  const auto [lo, hi] = p.key_range(b, r);
  double max = -kInf, min = kInf;
  for (int64_t j = lo; j < hi; ++j) {
    if (!in.keep(p, b, hq, r, j)) continue;
    const double bias = in.bias_at_key(p, b, hq, r, j);
    double s = p.logits_scale * dot[j];
    s += bias;
    if (p.logits_soft_cap > 0.0) s = p.logits_soft_cap * std::tanh(s / p.logits_soft_cap);
    logit[j] = s;
    // |computed - exact logit| / u: the D-term dot product in the accumulator type (products
    // of f32 inputs round too: D + 1 roundings of sum |q k|), the rounding of the scale, of the
    // bias add and of the cap's divide, tanh and multiply (tanh is 1-Lipschitz, so errors before
    // it pass through unamplified; a vectorized tanh/exp is good to a few ulp). Generous
    // constants: the bound has to hold for every implementation's order of operations.
    double delta = (p.D + 4.0) * std::fabs(p.logits_scale) * abs_dot[j] + 4.0 * std::fabs(bias) +
                   8.0 * std::fabs(s);
    // bf16 logits: upstream's chain rounds the product, the scaled product and the biased one,
    // and the cap's divide, tanh and multiply (tanh is 1-Lipschitz); a kernel may round once, at
    // the end.
    if (p.bf16_logits) {
      const double pre = p.logits_scale * dot[j] + bias;
      delta +=
          unit_roundoff(DType::kBF16) / unit_roundoff(DType::kF32) *
          (2.0 * std::fabs(p.logits_scale * dot[j]) + 2.0 * std::fabs(pre) + 2.0 * std::fabs(s));
    }
    row.logit_error = std::max(row.logit_error, delta);
    max = std::max(max, s);
    min = std::min(min, s);
  }
  if (max == -kInf) return row;
  row.empty = false;
  row.logit_range = max - min;
  double sum = 0.0;
  for (int64_t j = lo; j < hi; ++j) {
    if (logit[j] == -kInf) continue;
    row.p[j] = std::exp(logit[j] - max);
    sum += row.p[j];
  }
  for (int64_t j = lo; j < hi; ++j) row.p[j] /= sum;
  row.lse = max + std::log(sum);
  row.sum = sum;
  return row;
}

// The unit roundoff of the arithmetic implementations run at: f32 (softmax in >= f32), f64
// for f64 inputs.
double accumulation_unit(const AttentionProblem& p) {
  return unit_roundoff(p.dtype == DType::kF64 ? DType::kF64 : DType::kF32);
}

}  // namespace

AttentionMasks load_attention_masks(const AttentionProblem& p, const TensorMap& inputs) {
  AttentionMasks in;
  if (p.bias) {
    const Tensor& bias = inputs.find("bias")->second;
    in.bias.resize(static_cast<size_t>(bias.num_elements()));
    for (int64_t e = 0; e < bias.num_elements(); ++e) in.bias[e] = bias.get(e);
    in.bias_at = p.bias_layout();
  }
  if (p.mask) {
    const Tensor& mask = inputs.find("mask")->second;
    in.mask.resize(static_cast<size_t>(mask.num_elements()));
    for (int64_t e = 0; e < mask.num_elements(); ++e) in.mask[e] = mask.get(e) != 0.0;
    in.mask_at = p.mask_layout();
  }
  if (p.dropout_mask) {
    const Tensor& keep = inputs.find("dropout_mask")->second;
    in.dropout.resize(static_cast<size_t>(keep.num_elements()));
    for (int64_t e = 0; e < keep.num_elements(); ++e) in.dropout[e] = keep.get(e) != 0.0;
    in.dropout_at = p.dropout_layout();
  }
  return in;
}

KeyDots attention_key_dots(const AttentionProblem& p, const Tensor& queries, const Tensor& keys,
                           int64_t X, int64_t b, int64_t hq, std::span<const int64_t> rows,
                           OracleMethod method) {
  const int64_t i = hq / p.groups(), R = static_cast<int64_t>(rows.size());
  const StridedView q_rows{(b * p.T * p.H + hq) * X, p.H * X, 1};
  const StridedView k_rows{(b * p.t * p.h + i) * X, p.h * X, 1};
  KeyDots out;
  out.dot.assign(static_cast<size_t>(R * p.t), 0.0);
  out.abs.assign(out.dot.size(), 0.0);
  if (method == OracleMethod::kLoop) {
    for (int64_t r = 0; r < R; ++r) {
      const int64_t q_at = q_rows.offset + rows[r] * q_rows.row_stride;
      for (int64_t j = 0; j < p.t; ++j) {
        const int64_t k_at = k_rows.offset + j * k_rows.row_stride;
        double dot = 0.0, abs_dot = 0.0;
        for (int64_t x = 0; x < X; ++x) {
          const double term = queries.get(q_at + x) * keys.get(k_at + x);
          dot += term;
          abs_dot += std::fabs(term);
        }
        out.dot[r * p.t + j] = dot;
        out.abs[r * p.t + j] = abs_dot;
      }
    }
    return out;
  }
  const F64Matrix a = to_f64(queries, q_rows, 0, X, rows);
  const F64Matrix k = to_f64(keys, k_rows, p.t, X);
  f64_dot_rows_all(a.rows_view(), k.rows_view(), out.dot.data(), out.abs.data(), p.t);
  return out;
}

F64Matrix attention_key_columns(const AttentionProblem& p, const Tensor& values, int64_t X,
                                int64_t b, int64_t i) {
  // Element (c, j) is values[b, j, i, c].
  return to_f64(values, {(b * p.t * p.h + i) * X, 1, p.h * X}, X, p.t);
}

OracleSample dot_product_attention_oracle(const BoundArgs& args, const TensorMap& inputs,
                                          std::string_view output, std::span<const int64_t> index,
                                          OracleMethod method) {
  const AttentionProblem p = with_range_mask(AttentionProblem::from(args), inputs);
  if (output != "out" && !(output == "lse" && p.return_residuals)) {
    throw InvalidArgument("dot_product_attention has no output '" + std::string(output) + "'");
  }
  const AttentionMasks in = load_attention_masks(p, inputs);
  const Tensor& q = inputs.find("q")->second;
  const Tensor& k = inputs.find("k")->second;
  const Tensor& v = inputs.find("v")->second;
  const double u = accumulation_unit(p);
  // bf16 inputs may run P V with P rounded to bf16 (the cpu kernel's native_bf16 path).
  const double p_rounding = p.dtype == DType::kBF16 ? unit_roundoff(DType::kBF16) : 0.0;
  const bool lse = output == "lse";
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.assign(index.size(), 0.0);
  sample.magnitude.assign(index.size(), 0.0);
  // The samples of each head (b * H + hq) by row: lse [B, H, T], out [B, T, H, d].
  std::map<int64_t, std::map<int64_t, std::vector<size_t>>> heads;
  for (size_t s = 0; s < index.size(); ++s) {
    if (lse) {
      heads[index[s] / p.T][index[s] % p.T].push_back(s);
    } else {
      const int64_t flat_row = index[s] / p.d;
      const int64_t hq = flat_row % p.H, r = flat_row / p.H % p.T, b = flat_row / (p.H * p.T);
      heads[b * p.H + hq][r].push_back(s);
    }
  }
  const int64_t chunk = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(p.t, 1));
  for (const auto& [head, by_row] : heads) {
    const int64_t b = head / p.H, hq = head % p.H, i = hq / p.groups();
    std::vector<int64_t> all_rows;
    for (const auto& entry : by_row) all_rows.push_back(entry.first);
    const F64Matrix vt = lse ? F64Matrix{} : attention_key_columns(p, v, p.d, b, i);
    for (size_t r0 = 0; r0 < all_rows.size(); r0 += static_cast<size_t>(chunk)) {
      const std::span<const int64_t> rows(
          all_rows.data() + r0, std::min(all_rows.size() - r0, static_cast<size_t>(chunk)));
      const KeyDots dots = attention_key_dots(p, q, k, p.D, b, hq, rows, method);
      std::vector<OracleRow> oracle_rows;
      for (size_t r = 0; r < rows.size(); ++r) {
        oracle_rows.push_back(oracle_row(p, in, b, hq, rows[r], dots.dot.data() + r * p.t,
                                         dots.abs.data() + r * p.t));
      }
      if (lse) {
        // lse [B, H, T]: logits off by Delta move it by Delta too (a log-sum-exp is 1-Lipschitz
        // in the max norm); the sum's rounding (t terms, exp to a few ulp over the range R)
        // moves it by u (3t + 2R + 32) absolutely; -inf on rows without a visible key.
        for (size_t r = 0; r < rows.size(); ++r) {
          const OracleRow& row = oracle_rows[r];
          for (size_t s : by_row.at(rows[r])) {
            sample.value[s] = row.lse;
            if (!row.empty) {
              sample.magnitude[s] =
                  row.logit_error + 3.0 * p.t + 2.0 * row.logit_range + 32.0 + std::fabs(row.lse);
            }
          }
        }
        continue;
      }
      // out = P v at the requested columns, with W = sum_j p_j |v_j| (P >= 0: the magnitude).
      std::vector<DotPoint> points;
      std::vector<size_t> at;
      for (size_t r = 0; r < rows.size(); ++r) {
        for (size_t s : by_row.at(rows[r])) {
          points.push_back({static_cast<int64_t>(r), index[s] % p.d});
          at.push_back(s);
        }
      }
      std::vector<double> value(points.size()), weighted(points.size());
      if (method == OracleMethod::kLoop) {
        for (size_t n = 0; n < points.size(); ++n) {
          const std::vector<double>& pr = oracle_rows[points[n].a].p;
          const int64_t r = rows[points[n].a];
          for (int64_t j = 0; j < p.t; ++j) {
            if (pr[j] == 0.0) continue;
            const double w = pr[j] * in.dropped(p, b, hq, r, j);
            const double vj = vt.row(points[n].b)[j];
            value[n] += w * vj;
            weighted[n] += w * std::fabs(vj);
          }
        }
      } else {
        F64Matrix weights{std::vector<double>(rows.size() * static_cast<size_t>(p.t)),
                          static_cast<int64_t>(rows.size()), p.t};
        for (size_t r = 0; r < rows.size(); ++r) {
          std::copy(oracle_rows[r].p.begin(), oracle_rows[r].p.end(), weights.row(r));
          if (p.dropout_mask) {
            for (int64_t j = 0; j < p.t; ++j) weights.row(r)[j] *= in.dropped(p, b, hq, rows[r], j);
          }
        }
        f64_dot_rows(weights.rows_view(), vt.rows_view(), points, value, weighted);
      }
      for (size_t n = 0; n < points.size(); ++n) {
        const OracleRow& row = oracle_rows[points[n].a];
        if (row.empty) continue;  // no visible key: exactly zero
        // The error bound, relative to W (every error below scales a term of the weighted sum,
        // so W bounds what it can add up to, whatever the cancellation in the value):
        //  - logits off by at most Delta*u each move every p_j by a factor within
        //    exp(+-2 Delta u) (numerator and denominator): expm1(2 Delta u) W.
        //  - exp of an argument rounded to u |arg| (arguments, running maxima and rescale
        //    factors all stay within the row's logit range R), a few ulp per exp, one rounding
        //    per online rescale (at most one per key), the t-term sums of the denominator and
        //    of P V: u (3t + 2R + 32) W.
        //  - P stored in bf16 for P V: u_bf16 W.
        // The output rounding is the model's output_roundoff * |value|; error_model() has
        // accumulation_length 1 and roundoff u, so the bound is ~ u * magnitude.
        const double bracket = std::expm1(2.0 * row.logit_error * u) +
                               u * (3.0 * p.t + 2.0 * row.logit_range + 32.0) + p_rounding;
        // normalize_output false: the same sums times the row's denominator (each term
        // exp(logit_j - max) v_j carries the errors above, relative to its size).
        const double scale = p.normalize_output ? 1.0 : row.sum;
        sample.value[at[n]] = scale * value[n];
        sample.magnitude[at[n]] = scale * weighted[n] * bracket / u;
      }
    }
  }
  return sample;
}

template <>
OracleSample ProblemOp<AttentionProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                                 std::string_view output,
                                                 std::span<const int64_t> index) const {
  return dot_product_attention_oracle(args, inputs, output, index, OracleMethod::kBlocked);
}

}  // namespace tokamax
