// dot_product_attention_vjp: the float64 oracle of dq, dk, dv and dbias: the rows of the exact
// backward (oracle_rows.h), then each gradient element's sum over keys (dq) or rows (dk, dv,
// dbias), blocked or by the plain loop; the error model is in base_numerics.cc.
//
// Dimensions: as base.h (B, T, t, H, h, D, d; b, hq, r, j, i = hq / g; x a column of D, c
// of d); R the rows of one chunk, S sampled points.
#include "ops/dot_product_attention/oracle.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/dot_product_attention/range_mask.h"
#include "ops/dot_product_attention/vjp/api.h"
#include "ops/dot_product_attention/vjp/oracle_rows.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

// Rows of one head computed at once: their t-long rows, at most 2^20 doubles (8 MiB) per
// quantity, so that the buffers of one chunk are reused from the heap by the next instead of
// mapped and page-faulted afresh.
constexpr int64_t kChunkElements = int64_t{1} << 20;

// Each point's value, sum |terms| and propagated errors sum E |input|.
struct Sums {
  std::vector<double> value, terms, propagated;
  explicit Sums(size_t S) : value(S, 0.0), terms(S, 0.0), propagated(S, 0.0) {}
};

// rows [0, T) of a head in chunks, or the listed rows: calls fn(rows of the chunk).
template <typename Fn>
void for_row_chunks(std::span<const int64_t> rows, int64_t t, Fn&& fn) {
  const size_t chunk =
      static_cast<size_t>(std::max<int64_t>(1, kChunkElements / std::max<int64_t>(t, 1)));
  for (size_t r0 = 0; r0 < rows.size(); r0 += chunk) {
    fn(rows.subspan(r0, std::min(chunk, rows.size() - r0)));
  }
}

// [R, t] (or transposed [t, R]) of one of each row's t-long vectors, times `scale` per row. The
// transpose walks 32 x 32 blocks, so that its column writes stay in L1.
F64Matrix stack(const std::vector<VjpRow>& rows, std::vector<double> VjpRow::*member, int64_t t,
                bool transposed, const std::vector<double>* row_scale = nullptr) {
  const int64_t R = static_cast<int64_t>(rows.size());
  F64Matrix m{std::vector<double>(static_cast<size_t>(R * t)), transposed ? t : R,
              transposed ? R : t};
  constexpr int64_t kBlock = 32;
  for (int64_t n0 = 0; n0 < R; n0 += kBlock) {
    for (int64_t j0 = 0; j0 < t; j0 += kBlock) {
      for (int64_t n = n0; n < std::min(R, n0 + kBlock); ++n) {
        const double* x = (rows[n].*member).data();
        const double scale = row_scale ? (*row_scale)[n] : 1.0;
        for (int64_t j = j0; j < std::min(t, j0 + kBlock); ++j) {
          (transposed ? m.row(j)[n] : m.row(n)[j]) = scale * x[j];
        }
      }
    }
  }
  return m;
}

// value += a . b, terms += |a| . |b| and propagated += e . |b| at `points` (e >= 0), all times
// `scale`: the blocked form of every gradient's sums.
void add_products(const F64Matrix& a, const F64Matrix& e, const F64Matrix& b,
                  std::span<const DotPoint> points, std::span<const size_t> at, double scale,
                  Sums& out) {
  const size_t n = points.size();
  if (n == 0) return;
  std::vector<double> value(n), magnitude(n), propagated(n);
  f64_dot_rows(a.rows_view(), b.rows_view(), points, value, magnitude);
  const F64Matrix b_abs = abs_of(b);
  f64_dot_rows(e.rows_view(), b_abs.rows_view(), points, propagated, {});
  for (size_t k = 0; k < n; ++k) {
    out.value[at[k]] += scale * value[k];
    out.terms[at[k]] += std::fabs(scale) * magnitude[k];
    out.propagated[at[k]] += std::fabs(scale) * propagated[k];
  }
}

double terms_factor(double n, double u) { return n * (1.0 + 2.0 * n * u); }

}  // namespace

OracleSample dot_product_attention_vjp_oracle(const BoundArgs& args, const TensorMap& inputs,
                                              std::string_view output,
                                              std::span<const int64_t> index, OracleMethod method) {
  const AttentionProblem p = with_range_mask(AttentionProblem::from(args), inputs);
  if (output != "dq" && output != "dk" && output != "dv" && !(output == "dbias" && p.bias)) {
    throw InvalidArgument("dot_product_attention_vjp has no output '" + std::string(output) + "'");
  }
  const AttentionMasks masks = load_attention_masks(p, inputs);
  const ErrorModel model = dot_product_attention_vjp_op().error_model(args);
  VjpRowOptions options;
  options.u = model.accumulation_roundoff;
  options.out_rounding = args.has("out") ? unit_roundoff(p.dtype) / options.u : 0.0;
  options.method = method;
  const double u = options.u, scale = p.logits_scale;
  const bool loop = method == OracleMethod::kLoop;
  const Tensor& q = inputs.at("q");
  const Tensor& k = inputs.at("k");
  const Tensor& dout = inputs.at("dout");
  const int64_t g = p.groups();
  Sums sums(index.size());
  double n = 0.0;
  if (output == "dq") {
    // The samples of each head by row; dS rows against k's columns.
    std::map<int64_t, std::map<int64_t, std::vector<size_t>>> heads;
    for (size_t s = 0; s < index.size(); ++s) {
      const int64_t flat_row = index[s] / p.D;
      const int64_t hq = flat_row % p.H, r = flat_row / p.H % p.T, b = flat_row / (p.H * p.T);
      heads[b * p.H + hq][r].push_back(s);
    }
    for (const auto& entry : heads) {
      // Named, not a structured binding: the row chunks' lambda captures it.
      const int64_t b = entry.first / p.H, hq = entry.first % p.H;
      const std::map<int64_t, std::vector<size_t>>& by_row = entry.second;
      const F64Matrix kt = attention_key_columns(p, k, p.D, b, hq / g);  // [D, t]
      std::vector<int64_t> all_rows;
      all_rows.reserve(by_row.size());
      for (const auto& row : by_row) all_rows.push_back(row.first);
      for_row_chunks(all_rows, p.t, [&](std::span<const int64_t> rows) {
        const std::vector<VjpRow> vr = attention_vjp_rows(p, inputs, masks, b, hq, rows, options);
        std::vector<DotPoint> points;
        std::vector<size_t> at;
        for (size_t r = 0; r < rows.size(); ++r) {
          if (vr[r].empty) continue;
          for (size_t s : by_row.at(rows[r])) {
            points.push_back({static_cast<int64_t>(r), index[s] % p.D});
            at.push_back(s);
          }
        }
        if (!loop) {
          add_products(stack(vr, &VjpRow::ds, p.t, false), stack(vr, &VjpRow::es, p.t, false), kt,
                       points, at, scale, sums);
          return;
        }
        for (size_t m = 0; m < points.size(); ++m) {
          const VjpRow& row = vr[points[m].a];
          for (int64_t j = 0; j < p.t; ++j) {
            if (row.p[j] == 0.0) continue;
            const double kx = kt.row(points[m].b)[j];
            sums.value[at[m]] += scale * row.ds[j] * kx;
            sums.terms[at[m]] += std::fabs(scale) * std::fabs(row.ds[j] * kx);
            sums.propagated[at[m]] += std::fabs(scale) * row.es[j] * std::fabs(kx);
          }
        }
      });
    }
    n = p.t + 2.0;
  } else if (output == "dk" || output == "dv") {
    // Every row of the q heads of one (b, kv head) feeds each of its samples: dS^T (dk) or P^T
    // (dv) against q^T or dout^T, chunk by chunk of rows, the partial sums added.
    const bool is_dk = output == "dk";
    const int64_t width = is_dk ? p.D : p.d;
    std::map<int64_t, std::vector<size_t>> groups;  // b * h + i -> samples
    for (size_t s = 0; s < index.size(); ++s)
      groups[index[s] / width % p.h + index[s] / (width * p.h * p.t) * p.h].push_back(s);
    std::vector<int64_t> all_rows(static_cast<size_t>(p.T));
    for (int64_t r = 0; r < p.T; ++r) all_rows[r] = r;
    for (const auto& group : groups) {
      const int64_t b = group.first / p.h, i = group.first % p.h;
      const std::vector<size_t>& members = group.second;
      std::vector<DotPoint> points;  // (j, col)
      points.reserve(members.size());
      for (size_t s : members) points.push_back({index[s] / (width * p.h) % p.t, index[s] % width});
      for (int64_t hq = i * g; hq < (i + 1) * g; ++hq) {
        for_row_chunks(all_rows, p.t, [&](std::span<const int64_t> rows) {
          const std::vector<VjpRow> vr = attention_vjp_rows(p, inputs, masks, b, hq, rows, options);
          const int64_t R = static_cast<int64_t>(rows.size());
          // q^T or dout^T of these rows: element (col, n) is x[b, rows[n], hq, col].
          const F64Matrix xt =
              to_f64(is_dk ? q : dout, {((b * p.T + rows[0]) * p.H + hq) * width, 1, p.H * width},
                     width, R);
          if (!loop) {
            std::vector<double> eP(vr.size());
            for (size_t r = 0; r < vr.size(); ++r) eP[r] = vr[r].empty ? 0.0 : vr[r].eP;
            if (is_dk) {
              add_products(stack(vr, &VjpRow::ds, p.t, true), stack(vr, &VjpRow::es, p.t, true), xt,
                           points, members, scale, sums);
            } else {
              add_products(stack(vr, &VjpRow::p, p.t, true), stack(vr, &VjpRow::p, p.t, true, &eP),
                           xt, points, members, 1.0, sums);
            }
            return;
          }
          for (int64_t r = 0; r < R; ++r) {
            const VjpRow& row = vr[r];
            if (row.empty) continue;
            for (size_t m = 0; m < members.size(); ++m) {
              const int64_t j = points[m].a;
              if (row.p[j] == 0.0) continue;
              const double xv = xt.row(points[m].b)[r];
              const size_t s = members[m];
              if (is_dk) {
                sums.value[s] += scale * row.ds[j] * xv;
                sums.terms[s] += std::fabs(scale) * std::fabs(row.ds[j] * xv);
                sums.propagated[s] += std::fabs(scale) * row.es[j] * std::fabs(xv);
              } else {
                const double t_pd = std::fabs(row.p[j] * xv);
                sums.value[s] += row.p[j] * xv;
                sums.terms[s] += t_pd;
                sums.propagated[s] += row.eP * t_pd;
              }
            }
          }
        });
      }
    }
    n = static_cast<double>(g * p.T) + 2.0;
  } else {
    // dbias: every row of the problem, each visible entry added to the bias element it
    // broadcasts from when that element is sampled.
    std::unordered_map<int64_t, size_t> slot;
    for (size_t s = 0; s < index.size(); ++s) slot[index[s]] = s;
    const AttentionBroadcast at = p.bias_layout();
    const double positions = static_cast<double>(p.B * p.H * p.T * p.t) /
                             static_cast<double>(std::max<int64_t>(p.bias->num_elements(), 1));
    std::vector<int64_t> all_rows(static_cast<size_t>(p.T));
    for (int64_t r = 0; r < p.T; ++r) all_rows[r] = r;
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t hq = 0; hq < p.H; ++hq) {
        for_row_chunks(all_rows, p.t, [&](std::span<const int64_t> rows) {
          const std::vector<VjpRow> vr = attention_vjp_rows(p, inputs, masks, b, hq, rows, options);
          for (size_t r = 0; r < rows.size(); ++r) {
            if (vr[r].empty) continue;
            for (int64_t j = 0; j < p.t; ++j) {
              if (vr[r].p[j] == 0.0) continue;
              const auto it = slot.find(at.offset(b, hq, rows[r], j));
              if (it == slot.end()) continue;
              sums.value[it->second] += vr[r].ds[j];
              sums.terms[it->second] += std::fabs(vr[r].ds[j]);
              sums.propagated[it->second] += vr[r].es[j];
            }
          }
        });
      }
    }
    n = positions + 1.0;
  }
  // bf16 inputs may run dv, dk and dq with P and dS rounded to bf16 (the cpu kernel's
  // native_all path): one more relative rounding of every term.
  const double p_rounding =
      p.dtype == DType::kBF16 && output != "dbias" ? unit_roundoff(DType::kBF16) / u : 0.0;
  const DType out_dtype = output == "dbias" ? p.bias->dtype : p.dtype;
  const double floor_term = subnormal_floor(out_dtype) / u;
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value = std::move(sums.value);
  sample.magnitude.resize(index.size());
  for (size_t s = 0; s < index.size(); ++s) {
    sample.magnitude[s] =
        1.05 * (sums.propagated[s] + (terms_factor(n, u) + p_rounding) * sums.terms[s]) +
        floor_term;
  }
  return sample;
}

template <>
OracleSample ProblemOp<AttentionVjpProblem>::oracle(const BoundArgs& args, const TensorMap& inputs,
                                                    std::string_view output,
                                                    std::span<const int64_t> index) const {
  return dot_product_attention_vjp_oracle(args, inputs, output, index, OracleMethod::kBlocked);
}

}  // namespace tokamax
