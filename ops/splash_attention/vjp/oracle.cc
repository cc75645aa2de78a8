// splash_attention_vjp: the float64 oracle of dq, dk, dv and dsinks: the rows of the exact
// backward (oracle_rows.h), then each sampled element's sum over keys (dq) or rows (dk, dv,
// dsinks), with its value, sum |terms| and the rows' propagated errors.
//
// Dimensions: as base.h.
//
// Each gradient element is a sum of n products of dS (or P) with an input, in any order: one
// rounding per product, n' sum |terms| + sum E |input| with n' = n (1 + 2 n u), n = t + 2 for
// dq, g T + 2 for dk, g T + 1 for dv (its P terms carry eP), T + 2 for dsinks (whose terms
// exp(sink - lse) (out . dout) carry eP and out . dout's error); for bf16 inputs + u_bf16 / u
// on the dq, dk and dv terms (P and dS may be rounded to bf16 for those products). Times 1.05
// for second-order terms, plus the output dtype's subnormal spacing.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ops/framework/errors.h"
#include "ops/splash_attention/vjp/api.h"
#include "ops/splash_attention/vjp/oracle_rows.h"

namespace tokamax {
namespace {

// Each point's value, sum |terms| and propagated errors sum E |input|.
struct Sums {
  std::vector<double> value, terms, propagated;
  explicit Sums(size_t S) : value(S, 0.0), terms(S, 0.0), propagated(S, 0.0) {}
  void add(size_t s, double term, double error) {
    value[s] += term;
    terms[s] += std::fabs(term);
    propagated[s] += error;
  }
};

}  // namespace

template <>
OracleSample ProblemOp<SplashAttentionVjpProblem>::oracle(const BoundArgs& args,
                                                          const TensorMap& inputs,
                                                          std::string_view output,
                                                          std::span<const int64_t> index) const {
  const SplashAttentionVjpProblem vp = SplashAttentionVjpProblem::from(args);
  const SplashAttentionProblem& p = vp.fwd;
  const bool is_dq = output == "dq", is_dk = output == "dk", is_dv = output == "dv";
  const bool is_dsinks = output == "dsinks" && p.has_sinks;
  if (!is_dq && !is_dk && !is_dv && !is_dsinks) {
    throw InvalidArgument("splash_attention_vjp has no output '" + std::string(output) + "'");
  }
  const SplashVjpRows rows(vp, inputs);
  const Tensor& q = inputs.at("q");
  const Tensor& k = inputs.at("k");
  const Tensor& dout = inputs.at("dout");
  const int64_t g = p.groups();
  Sums sums(index.size());
  double n = 0.0;
  if (is_dq) {
    std::map<int64_t, std::vector<size_t>> by_row;  // hq * T + r -> samples
    for (size_t s = 0; s < index.size(); ++s) by_row[index[s] / p.D].push_back(s);
    for (const auto& [flat, samples] : by_row) {
      const int64_t hq = flat / p.T, h = hq / g;
      const SplashVjpRow row = rows.row(hq, flat % p.T);
      for (const size_t s : samples) {
        const int64_t x = index[s] % p.D;
        for (size_t e = 0; e < row.keys.size(); ++e) {
          const double kx = k.get((h * p.t + row.keys[e]) * p.D + x);
          sums.add(s, row.ds[e] * kx, row.es[e] * std::fabs(kx));
        }
      }
    }
    n = p.t + 2.0;
  } else if (is_dk || is_dv) {
    // Every row of the g q heads of a kv head feeds its samples: samples by (kv head, key).
    const int64_t width = is_dk ? p.D : p.d;
    std::map<int64_t, std::map<int64_t, std::vector<size_t>>> heads;  // h -> j -> samples
    for (size_t s = 0; s < index.size(); ++s) {
      heads[index[s] / (width * p.t)][index[s] / width % p.t].push_back(s);
    }
    for (const auto& [h, by_key] : heads) {
      for (int64_t hq = h * g; hq < (h + 1) * g; ++hq) {
        for (int64_t r = 0; r < p.T; ++r) {
          const SplashVjpRow row = rows.row(hq, r);
          for (size_t e = 0; e < row.keys.size(); ++e) {
            const auto it = by_key.find(row.keys[e]);
            if (it == by_key.end()) continue;
            for (const size_t s : it->second) {
              const int64_t col = index[s] % width;
              if (is_dk) {
                const double qx = q.get((hq * p.T + r) * p.D + col);
                sums.add(s, row.ds[e] * qx, row.es[e] * std::fabs(qx));
              } else {
                const double term = row.p[e] * dout.get((hq * p.T + r) * p.d + col);
                sums.add(s, term, row.eP * std::fabs(term));
              }
            }
          }
        }
      }
    }
    n = static_cast<double>(g * p.T) + 2.0;
  } else {
    for (size_t s = 0; s < index.size(); ++s) {
      const int64_t hq = index[s];
      const double sink = inputs.at("sinks").get(hq);
      for (int64_t r = 0; r < p.T; ++r) {
        const SplashVjpRow row = rows.row(hq, r);
        const double e = std::exp(sink - row.lse);
        sums.add(s, -e * row.od, e * (row.eP * std::fabs(row.od) + row.e_od));
      }
    }
    n = p.T + 2.0;
  }
  const double u = unit_roundoff(DType::kF32);
  const double p_rounding =
      p.dtype == DType::kBF16 && !is_dsinks ? unit_roundoff(DType::kBF16) / u : 0.0;
  const DType out_dtype = is_dsinks ? args.tensor("sinks").dtype : p.dtype;
  const double floor_term = subnormal_floor(out_dtype) / u;
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value = std::move(sums.value);
  sample.magnitude.resize(index.size());
  for (size_t s = 0; s < index.size(); ++s) {
    sample.magnitude[s] =
        1.05 * (sums.propagated[s] + (n * (1.0 + 2.0 * n * u) + p_rounding) * sums.terms[s]) +
        floor_term;
  }
  return sample;
}

}  // namespace tokamax
