// dot_product_attention_vjp: seeded inputs, the float64 oracle of every gradient and its error
// model (the reference itself is in vjp_reference.cc).
//
// Dimensions.
//   *B, T, t, H, h, D, d   as vjp_base.h; b, hq, r, j as there, i = hq / g, x a column of D,
//                          c a column of d
//   u      the accumulator's unit roundoff (f32; f64 for f64 inputs)
//
// Error model (every quantity in units of u, per row (b, hq, r) of the exact problem).
//  - Logits and P: as the forward's (base_reference.cc): each visible logit is off by at most
//    Delta (its D-term dot product, scale, bias, cap), so each P_j = exp(s_j - lse) is off by a
//    relative eP = expm1(2 Delta u) / u + 3t + 2R + 32 + |lse| + 4 (the forward's bracket, plus
//    lse's own rounding when it comes as an f32 input; R the row's logit range).
//  - dP_j = dout . v_j, a d-term dot product: off by (d + 1) A_j, A_j = sum_c |dout_c v_jc|.
//  - Dr = rowsum(dout * out) = sum_j P_j dP_j: every term carries P's and dP's error and one of
//    (t + d + 4) roundings in whichever order it is summed (out recomputed, or P . dP):
//    E_D = M_D (eP + t + d + 4), M_D = sum_j P_j A_j (>= |Dr|), plus u_bf16 / u for bf16
//    inputs (out recomputed with P in bf16); when out is an input, rounded to q's dtype, plus
//    (u_out / u) sum_c |dout_c out_c|.
//  - dS_j = P_j (dP_j - Dr) G_j with G_j = 1 - tanh^2 under the cap (else 1, G <= 1): off by
//    E_j = P_j [ (eP + 4 + kCap) |dP_j - Dr| + (d + 1) A_j + E_D ], kCap = Delta / c + 4 for
//    G's error (|dG/dz| <= 1/c, z off by Delta) and its evaluation, 0 without a cap.
//  - Each gradient element is then a sum of n products of dS (or P) with an input, in any
//    order, one rounding per product and the scale's: n' sum |terms| + sum E |input|, with
//    n = t + 2 for dq, g T + 2 for dk (the q heads of a kv head, every row), g T + 1 for dv
//    (whose P terms carry eP), and the count of broadcast positions + 1 for dbias. For bf16
//    inputs, + u_bf16 / u on the dq, dk and dv terms: P and dS may be rounded to bf16 for those
//    products (as the forward's bound allows P in bf16).
// The four outputs sum different numbers of terms, so accumulation_length is 1 and each
// sampled point's magnitude is its bracket (times 1.05 for second-order terms), as the other
// VJP ops do; output_roundoff is the coarser of the q and bias dtypes' (each output rounds
// once), and f16's subnormal spacing an absolute floor.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/dot_product_attention/api.h"
#include "ops/dot_product_attention/vjp_base.h"
#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/vjp.h"

namespace tokamax {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> to_doubles(const Tensor& x) {
  std::vector<double> out(static_cast<size_t>(x.num_elements()));
  for (int64_t e = 0; e < x.num_elements(); ++e) out[e] = x.get(e);
  return out;
}

// The inputs as double, read many times by the oracle.
struct VjpInputs {
  std::vector<double> q, k, v, bias, dout;
  std::vector<uint8_t> mask;
  AttentionBroadcast bias_at, mask_at;
};

VjpInputs load(const AttentionProblem& p, const TensorMap& inputs) {
  VjpInputs in;
  in.q = to_doubles(inputs.find("q")->second);
  in.k = to_doubles(inputs.find("k")->second);
  in.v = to_doubles(inputs.find("v")->second);
  if (const Tensor* dout = find_tensor(inputs, "dout")) in.dout = to_doubles(*dout);
  if (p.bias) {
    in.bias = to_doubles(inputs.find("bias")->second);
    in.bias_at = p.bias_layout();
  }
  if (p.mask) {
    const Tensor& mask = inputs.find("mask")->second;
    in.mask.resize(static_cast<size_t>(mask.num_elements()));
    for (int64_t e = 0; e < mask.num_elements(); ++e) in.mask[e] = mask.get(e) != 0.0;
    in.mask_at = p.mask_layout();
  }
  return in;
}

// One row (b, hq, r) of the exact backward and its error terms (units of u).
struct VjpRow {
  bool empty = true;
  double lse = -kInf;
  double eP = 0.0;         // relative error of each P_j
  std::vector<double> p;   // [t] softmax weights, 0 where masked
  std::vector<double> ds;  // [t] dS (before the scale)
  std::vector<double> es;  // [t] the bound on dS's error
};

// out_rounding: u_out / u when out comes as an input rounded to q's dtype (its rounding enters
// Dr = dout . out), else 0.
VjpRow vjp_row(const AttentionProblem& p, const VjpInputs& in, int64_t b, int64_t hq, int64_t r,
               double u, double out_rounding = 0.0, bool with_cotangent = true,
               std::vector<double>* out = nullptr) {
  const int64_t i = hq / p.groups();
  if (out) out->assign(static_cast<size_t>(p.d), 0.0);  // zeros for a row without keys
  VjpRow row;
  row.p.assign(static_cast<size_t>(p.t), 0.0);
  row.ds.assign(static_cast<size_t>(p.t), 0.0);
  row.es.assign(static_cast<size_t>(p.t), 0.0);
  std::vector<double> logit(static_cast<size_t>(p.t), -kInf), gate(static_cast<size_t>(p.t), 1.0);
  const auto [lo, hi] = p.key_range(b, r);
  const double* q_row = &in.q[((b * p.T + r) * p.H + hq) * p.D];
  const double cap = p.logits_soft_cap;
  double max = -kInf, min = kInf, delta = 0.0;
  for (int64_t j = lo; j < hi; ++j) {
    if (p.mask && !in.mask[in.mask_at.offset(b, hq, r, j)]) continue;
    const double* k_row = &in.k[((b * p.t + j) * p.h + i) * p.D];
    double dot = 0.0, abs_dot = 0.0;
    for (int64_t x = 0; x < p.D; ++x) {
      dot += q_row[x] * k_row[x];
      abs_dot += std::fabs(q_row[x] * k_row[x]);
    }
    double z = p.logits_scale * dot;
    const double bias = p.bias ? in.bias[in.bias_at.offset(b, hq, r, j)] : 0.0;
    z += bias;
    double s = z;
    if (cap > 0.0) {
      const double th = std::tanh(z / cap);
      s = cap * th;
      gate[j] = 1.0 - th * th;
    }
    logit[j] = s;
    delta = std::max(delta, (p.D + 4.0) * std::fabs(p.logits_scale) * abs_dot +
                                4.0 * std::fabs(bias) + 8.0 * std::fabs(s));
    max = std::max(max, s);
    min = std::min(min, s);
  }
  if (max == -kInf) return row;
  row.empty = false;
  double sum = 0.0;
  for (int64_t j = lo; j < hi; ++j) {
    if (logit[j] == -kInf) continue;
    row.p[j] = std::exp(logit[j] - max);
    sum += row.p[j];
  }
  for (int64_t j = lo; j < hi; ++j) row.p[j] /= sum;
  row.lse = max + std::log(sum);
  row.eP = std::expm1(2.0 * delta * u) / u + 3.0 * p.t + 2.0 * (max - min) + 32.0 +
           std::fabs(row.lse) + 4.0;
  if (out) {
    for (int64_t j = lo; j < hi; ++j) {
      if (row.p[j] == 0.0) continue;
      const double* v_row = &in.v[((b * p.t + j) * p.h + i) * p.d];
      for (int64_t c = 0; c < p.d; ++c) (*out)[c] += row.p[j] * v_row[c];
    }
  }
  if (!with_cotangent) return row;
  // dP_j, A_j, then Dr = sum_j P_j dP_j and M_D.
  const double* dout_row = &in.dout[((b * p.T + r) * p.H + hq) * p.d];
  std::vector<double> dP(static_cast<size_t>(p.t), 0.0), A(static_cast<size_t>(p.t), 0.0);
  double Dr = 0.0, MD = 0.0;
  for (int64_t j = lo; j < hi; ++j) {
    if (row.p[j] == 0.0) continue;
    const double* v_row = &in.v[((b * p.t + j) * p.h + i) * p.d];
    for (int64_t c = 0; c < p.d; ++c) {
      dP[j] += dout_row[c] * v_row[c];
      A[j] += std::fabs(dout_row[c] * v_row[c]);
    }
    Dr += row.p[j] * dP[j];
    MD += row.p[j] * A[j];
  }
  // bf16 inputs: out may be recomputed with P rounded to bf16 (native_all), u_bf16 per term.
  const double p_rounding = p.dtype == DType::kBF16 ? unit_roundoff(DType::kBF16) / u : 0.0;
  double ED = MD * (row.eP + p.t + p.d + 4.0 + p_rounding);
  if (out_rounding > 0.0) {
    // Dr from the rounded out: each out_c off by u_out |out_c| more.
    double dout_out = 0.0;
    for (int64_t c = 0; c < p.d; ++c) {
      double out_c = 0.0;
      for (int64_t j = lo; j < hi; ++j) {
        if (row.p[j] != 0.0) out_c += row.p[j] * in.v[((b * p.t + j) * p.h + i) * p.d + c];
      }
      dout_out += std::fabs(dout_row[c] * out_c);
    }
    ED += out_rounding * dout_out;
  }
  const double kCap = cap > 0.0 ? delta / cap + 4.0 : 0.0;
  for (int64_t j = lo; j < hi; ++j) {
    if (row.p[j] == 0.0) continue;
    row.ds[j] = row.p[j] * (dP[j] - Dr) * gate[j];
    row.es[j] =
        row.p[j] * ((row.eP + 4.0 + kCap) * std::fabs(dP[j] - Dr) + (p.d + 1.0) * A[j] + ED);
  }
  return row;
}

DType accumulator(const AttentionProblem& p) {
  return p.dtype == DType::kF64 ? DType::kF64 : DType::kF32;
}

// n' = n (1 + 2 n u): gamma_n / u for n u <= 1/4.
double terms_factor(double n, double u) { return n * (1.0 + 2.0 * n * u); }

}  // namespace

TensorMap DotProductAttentionVjpOp::make_inputs(const BoundArgs& args, uint64_t seed) const {
  // The forward's inputs (q, k, v, bias ~ N(0, 1), mask ~80% kept), a cotangent ~ N(0, 1), and
  // lse and out, when asked for, exactly as the forward defines them (f64, rounded once to
  // their dtypes).
  const DotProductAttentionOp& fwd = dot_product_attention_op();
  TensorMap inputs = fwd.make_inputs(primal_args(fwd, args, cotangents()), seed);
  inputs.emplace("dout", normal_tensor(args.tensor("dout"), seed, "dout"));
  const bool has_lse = args.has("lse"), has_out = args.has("out");
  if (has_lse || has_out) {
    const AttentionProblem p = AttentionProblem::from(args);
    const VjpInputs in = load(p, inputs);
    Tensor lse(attention_lse_spec(p));
    Tensor out(dot_product_attention_op()
                   .outputs(primal_args(dot_product_attention_op(), args, cotangents()))[0]
                   .spec);
    std::vector<double> out_row;
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t hq = 0; hq < p.H; ++hq) {
        for (int64_t r = 0; r < p.T; ++r) {
          const VjpRow row = vjp_row(p, in, b, hq, r, 0.0, 0.0, false, &out_row);
          lse.set((b * p.H + hq) * p.T + r, row.lse);
          for (int64_t c = 0; c < p.d; ++c)
            out.set(((b * p.T + r) * p.H + hq) * p.d + c, out_row[c]);
        }
      }
    }
    if (has_lse) inputs.emplace("lse", std::move(lse));
    if (has_out) inputs.emplace("out", std::move(out));
  }
  return inputs;
}

OracleSample DotProductAttentionVjpOp::oracle(const BoundArgs& args, const TensorMap& inputs,
                                              std::string_view output,
                                              std::span<const int64_t> index) const {
  const AttentionProblem p = AttentionProblem::from(args);
  if (output != "dq" && output != "dk" && output != "dv" && !(output == "dbias" && p.bias)) {
    throw InvalidArgument("dot_product_attention_vjp has no output '" + std::string(output) + "'");
  }
  const VjpInputs in = load(p, inputs);
  const double u = unit_roundoff(accumulator(p));
  const double scale = std::fabs(p.logits_scale);
  const DType out_dtype = output == "dbias" ? p.bias->dtype : p.dtype;
  const double floor_term = subnormal_floor(out_dtype) / u;
  const double out_rounding = args.has("out") ? unit_roundoff(p.dtype) / u : 0.0;
  // bf16 inputs may run dv, dk and dq with P and dS rounded to bf16 (the cpu kernel's
  // native_all path): one more relative rounding of every term.
  const double p_rounding =
      p.dtype == DType::kBF16 && output != "dbias" ? unit_roundoff(DType::kBF16) / u : 0.0;
  const int64_t g = p.groups();
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.assign(index.size(), 0.0);
  sample.magnitude.assign(index.size(), 0.0);
  std::vector<double> terms(index.size(), 0.0), propagated(index.size(), 0.0);
  double n = 0.0;
  if (output == "dq") {
    // One row per sample; sorted indices visit the D columns of a row together.
    int64_t cached = -1;
    VjpRow row;
    for (size_t s = 0; s < index.size(); ++s) {
      const int64_t flat_row = index[s] / p.D, x = index[s] % p.D;
      const int64_t hq = flat_row % p.H, r = (flat_row / p.H) % p.T, b = flat_row / (p.H * p.T);
      if (flat_row != cached) {
        row = vjp_row(p, in, b, hq, r, u, out_rounding);
        cached = flat_row;
      }
      if (row.empty) continue;
      const int64_t i = hq / g;
      for (int64_t j = 0; j < p.t; ++j) {
        if (row.p[j] == 0.0) continue;
        const double kx = in.k[((b * p.t + j) * p.h + i) * p.D + x];
        sample.value[s] += p.logits_scale * row.ds[j] * kx;
        terms[s] += scale * std::fabs(row.ds[j] * kx);
        propagated[s] += scale * row.es[j] * std::fabs(kx);
      }
    }
    n = p.t + 2.0;
  } else if (output == "dk" || output == "dv") {
    // Every row of the q heads of one (b, kv head) feeds each of its samples: one sweep per
    // (b, i) over its g T rows, no row kept.
    const bool is_dk = output == "dk";
    const int64_t width = is_dk ? p.D : p.d;
    std::map<int64_t, std::vector<size_t>> groups;  // b * h + i -> samples
    for (size_t s = 0; s < index.size(); ++s)
      groups[index[s] / width % p.h + index[s] / (width * p.h * p.t) * p.h].push_back(s);
    for (const auto& [bi, members] : groups) {
      const int64_t b = bi / p.h, i = bi % p.h;
      for (int64_t hq = i * g; hq < (i + 1) * g; ++hq) {
        for (int64_t r = 0; r < p.T; ++r) {
          const VjpRow row = vjp_row(p, in, b, hq, r, u, out_rounding);
          if (row.empty) continue;
          const double* q_row = &in.q[((b * p.T + r) * p.H + hq) * p.D];
          const double* dout_row = &in.dout[((b * p.T + r) * p.H + hq) * p.d];
          for (size_t s : members) {
            const int64_t col = index[s] % width, j = index[s] / (width * p.h) % p.t;
            if (row.p[j] == 0.0) continue;
            if (is_dk) {
              sample.value[s] += p.logits_scale * row.ds[j] * q_row[col];
              terms[s] += scale * std::fabs(row.ds[j] * q_row[col]);
              propagated[s] += scale * row.es[j] * std::fabs(q_row[col]);
            } else {
              const double t_pd = std::fabs(row.p[j] * dout_row[col]);
              sample.value[s] += row.p[j] * dout_row[col];
              terms[s] += t_pd;
              propagated[s] += row.eP * t_pd;
            }
          }
        }
      }
    }
    n = static_cast<double>(g * p.T) + 2.0;
  } else {
    // dbias: every row of the problem, each visible entry added to the bias element it
    // broadcasts from when that element is sampled.
    std::unordered_map<int64_t, size_t> slot;
    for (size_t s = 0; s < index.size(); ++s) slot[index[s]] = s;
    const AttentionBroadcast at = p.bias_layout();
    double positions = static_cast<double>(p.B * p.H * p.T * p.t) /
                       static_cast<double>(std::max<int64_t>(p.bias->num_elements(), 1));
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t hq = 0; hq < p.H; ++hq) {
        for (int64_t r = 0; r < p.T; ++r) {
          const VjpRow row = vjp_row(p, in, b, hq, r, u, out_rounding);
          if (row.empty) continue;
          for (int64_t j = 0; j < p.t; ++j) {
            if (row.p[j] == 0.0) continue;
            const auto it = slot.find(at.offset(b, hq, r, j));
            if (it == slot.end()) continue;
            sample.value[it->second] += row.ds[j];
            terms[it->second] += std::fabs(row.ds[j]);
            propagated[it->second] += row.es[j];
          }
        }
      }
    }
    n = positions + 1.0;
  }
  for (size_t s = 0; s < index.size(); ++s) {
    sample.magnitude[s] =
        1.05 * (propagated[s] + (terms_factor(n, u) + p_rounding) * terms[s]) + floor_term;
  }
  return sample;
}

double DotProductAttentionVjpOp::oracle_cost_per_output(const BoundArgs& args) const {
  // A dq sample costs its row (t (D + d)); dk, dv and dbias samples share whole sweeps, which
  // this ignores.
  const AttentionProblem p = AttentionProblem::from(args);
  return static_cast<double>(std::max<int64_t>(p.t, 1)) * (p.D + p.d + 1.0);
}

ErrorModel DotProductAttentionVjpOp::error_model(const BoundArgs& args) const {
  const AttentionProblem p = AttentionProblem::from(args);
  ErrorModel model;
  model.accumulation_roundoff = unit_roundoff(accumulator(p));
  model.accumulation_length = 1.0;  // each point's term counts are in its magnitude
  model.output_roundoff = unit_roundoff(p.dtype);
  if (p.bias) model.output_roundoff = std::max(model.output_roundoff, unit_roundoff(p.bias->dtype));
  return model;
}

}  // namespace tokamax
