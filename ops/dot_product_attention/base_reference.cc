// dot_product_attention: seeded inputs, the float64 oracle and its error model, the reference.
//
// Dimensions.
//   *B     batch dimensions, B = prod(*B); b the flattened batch index
//   T, t   query and key/value positions; r a query row, j a key
//   H, h   query and key/value heads, g = H / h; hq a query head, hq / g its kv head
//   D, d   q/k and v head dimensions; c an output column
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/dot_product_attention/base.h"
#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"

namespace tokamax {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The inputs as double (the oracle reads each element many times; converting once is cheaper
// than Tensor::get per read).
struct DoubleInputs {
  std::vector<double> q, k, v, bias;
  std::vector<uint8_t> mask;
  AttentionBroadcast bias_at, mask_at;
};

std::vector<double> to_doubles(const Tensor& x) {
  std::vector<double> out(static_cast<size_t>(x.num_elements()));
  for (int64_t i = 0; i < x.num_elements(); ++i) out[i] = x.get(i);
  return out;
}

DoubleInputs load(const AttentionProblem& p, const TensorMap& inputs) {
  DoubleInputs in;
  in.q = to_doubles(inputs.find("q")->second);
  in.k = to_doubles(inputs.find("k")->second);
  in.v = to_doubles(inputs.find("v")->second);
  if (p.bias) {
    in.bias = to_doubles(inputs.find("bias")->second);
    in.bias_at = p.bias_layout();
  }
  if (p.mask) {
    const Tensor& mask = inputs.find("mask")->second;
    in.mask.resize(static_cast<size_t>(mask.num_elements()));
    for (int64_t i = 0; i < mask.num_elements(); ++i) in.mask[i] = mask.get(i) != 0.0;
    in.mask_at = p.mask_layout();
  }
  return in;
}

// One row of the oracle: exact (double) logits of the rounded inputs and the quantities its
// error bound needs.
struct OracleRow {
  std::vector<double> p;     // [t] softmax weights, 0 where masked
  double logit_error = 0.0;  // Delta: max over visible keys of the bound on |logit error| / u
  double logit_range = 0.0;  // R: max - min of the visible logits
  double lse = -kInf;        // log sum_j exp(logit_j)
  bool empty = true;
};

OracleRow oracle_row(const AttentionProblem& p, const DoubleInputs& in, int64_t b, int64_t hq,
                     int64_t r) {
  const int64_t i = hq / p.groups();
  OracleRow row;
  row.p.assign(static_cast<size_t>(p.t), 0.0);
  std::vector<double> logit(static_cast<size_t>(p.t), -kInf);
  const auto [lo, hi] = p.key_range(b, r);
  const double* q_row = &in.q[((b * p.T + r) * p.H + hq) * p.D];
  double max = -kInf, min = kInf;
  for (int64_t j = lo; j < hi; ++j) {
    if (p.mask && !in.mask[in.mask_at.offset(b, hq, r, j)]) continue;
    const double* k_row = &in.k[((b * p.t + j) * p.h + i) * p.D];
    double dot = 0.0, abs_dot = 0.0;
    for (int64_t x = 0; x < p.D; ++x) {
      dot += q_row[x] * k_row[x];
      abs_dot += std::fabs(q_row[x] * k_row[x]);
    }
    double s = p.logits_scale * dot;
    double bias = 0.0;
    if (p.bias) bias = in.bias[in.bias_at.offset(b, hq, r, j)];
    s += bias;
    if (p.logits_soft_cap > 0.0) s = p.logits_soft_cap * std::tanh(s / p.logits_soft_cap);
    logit[j] = s;
    // |computed - exact logit| / u: the D-term dot product in the accumulator type (products
    // of f32 inputs round too: D + 1 roundings of sum |q k|), the rounding of the scale, of the
    // bias add and of the cap's divide, tanh and multiply (tanh is 1-Lipschitz, so errors before
    // it pass through unamplified; a vectorized tanh/exp is good to a few ulp). Generous
    // constants: the bound has to hold for every implementation's order of operations.
    const double delta = (p.D + 4.0) * std::fabs(p.logits_scale) * abs_dot + 4.0 * std::fabs(bias) +
                         8.0 * std::fabs(s);
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
  return row;
}

// The unit roundoff of the arithmetic implementations run at: f32 (softmax in >= f32), f64
// for f64 inputs.
double accumulation_unit(const AttentionProblem& p) {
  return unit_roundoff(p.dtype == DType::kF64 ? DType::kF64 : DType::kF32);
}

}  // namespace

TensorMap DotProductAttentionOp::make_inputs(const BoundArgs& args, uint64_t seed) const {
  const AttentionProblem p = AttentionProblem::from(args);
  TensorMap inputs;
  // q, k, v ~ N(0, 1): with the default scale 1/sqrt(D) the logits are ~ N(0, 1), as after
  // a trained model's normalisation; bias ~ N(0, 1) too; mask keeps ~80% of the entries.
  for (const char* name : {"q", "k", "v", "bias"}) {
    if (std::string(name) == "bias" && !p.bias) continue;
    inputs.emplace(
        name, normal_tensor(std::string(name) == "bias" ? *p.bias : args.tensor(name), seed, name));
  }
  if (p.mask) {
    Tensor mask(*p.mask);
    const uint64_t stream = stream_id("mask");
    for (int64_t e = 0; e < mask.num_elements(); ++e) {
      mask.set(e, uniform01(seed, stream, e) < 0.8 ? 1.0 : 0.0);
    }
    inputs.emplace("mask", std::move(mask));
  }
  return inputs;
}

OracleSample DotProductAttentionOp::oracle(const BoundArgs& args, const TensorMap& inputs,
                                           std::string_view output,
                                           std::span<const int64_t> index) const {
  const AttentionProblem p = AttentionProblem::from(args);
  if (output != "out" && !(output == "lse" && p.return_residuals)) {
    throw InvalidArgument("dot_product_attention has no output '" + std::string(output) + "'");
  }
  const DoubleInputs in = load(p, inputs);
  const double u = accumulation_unit(p);
  // bf16 inputs may run P V with P rounded to bf16 (the cpu kernel's native_bf16 path).
  const double p_rounding = p.dtype == DType::kBF16 ? unit_roundoff(DType::kBF16) : 0.0;
  OracleSample sample;
  sample.index.assign(index.begin(), index.end());
  sample.value.assign(index.size(), 0.0);
  sample.magnitude.assign(index.size(), 0.0);
  if (output == "lse") {
    // lse [B, H, T]: logits off by Delta move it by Delta too (a log-sum-exp is 1-Lipschitz in
    // the max norm); the sum's rounding (t terms, exp to a few ulp over the range R) moves it by
    // u (3t + 2R + 32) absolutely; -inf on rows without a visible key.
    for (size_t s = 0; s < index.size(); ++s) {
      const int64_t r = index[s] % p.T, hq = index[s] / p.T % p.H, b = index[s] / (p.T * p.H);
      const OracleRow row = oracle_row(p, in, b, hq, r);
      sample.value[s] = row.lse;
      if (!row.empty) {
        sample.magnitude[s] =
            row.logit_error + 3.0 * p.t + 2.0 * row.logit_range + 32.0 + std::fabs(row.lse);
      }
    }
    return sample;
  }
  // Sorted indices visit the d columns of a row together: the row is computed once.
  int64_t cached = -1;
  OracleRow row;
  for (size_t s = 0; s < index.size(); ++s) {
    const int64_t flat_row = index[s] / p.d, c = index[s] % p.d;
    if (flat_row != cached) {
      const int64_t hq = flat_row % p.H, r = (flat_row / p.H) % p.T, b = flat_row / (p.H * p.T);
      row = oracle_row(p, in, b, hq, r);
      cached = flat_row;
    }
    if (row.empty) continue;  // no visible key: exactly zero
    const int64_t b = flat_row / (p.H * p.T), i = (flat_row % p.H) / p.groups();
    double value = 0.0, weighted = 0.0;
    for (int64_t j = 0; j < p.t; ++j) {
      if (row.p[j] == 0.0) continue;
      const double vj = in.v[((b * p.t + j) * p.h + i) * p.d + c];
      value += row.p[j] * vj;
      weighted += row.p[j] * std::fabs(vj);
    }
    // The error bound, relative to W = sum_j p_j |v_j| (every error below scales a term of the
    // weighted sum, so W bounds what it can add up to, whatever the cancellation in the value):
    //  - logits off by at most Delta*u each move every p_j by a factor within exp(+-2 Delta u)
    //    (numerator and denominator): expm1(2 Delta u) W.
    //  - exp of an argument rounded to u |arg| (arguments, running maxima and rescale factors
    //    all stay within the row's logit range R), a few ulp per exp, one rounding per online
    //    rescale (at most one per key), the t-term sums of the denominator and of P V:
    //    u (3t + 2R + 32) W.
    //  - P stored in bf16 for P V: u_bf16 W.
    // The output rounding is the model's output_roundoff * |value|.
    const double bracket = std::expm1(2.0 * row.logit_error * u) +
                           u * (3.0 * p.t + 2.0 * row.logit_range + 32.0) + p_rounding;
    sample.value[s] = value;
    // error_model() has accumulation_length 1 and roundoff u: the bound is ~ u * magnitude.
    sample.magnitude[s] = weighted * bracket / u;
  }
  return sample;
}

double DotProductAttentionOp::oracle_cost_per_output(const BoundArgs& args) const {
  // A sampled output costs its row's logits (t * D) plus its own t-term sum; rows shared by
  // neighbouring samples are computed once, which this ignores.
  const AttentionProblem p = AttentionProblem::from(args);
  return static_cast<double>(std::max<int64_t>(p.t, 1)) * (p.D + 1.0);
}

ErrorModel DotProductAttentionOp::error_model(const BoundArgs& args) const {
  const AttentionProblem p = AttentionProblem::from(args);
  ErrorModel model;
  // The oracle's magnitude is already the whole accumulated error budget in units of u (see
  // oracle()): length 1.
  model.accumulation_roundoff = accumulation_unit(p);
  model.accumulation_length = 1.0;
  model.output_roundoff = unit_roundoff(p.dtype);
  return model;
}

template <typename Acc>
void dot_product_attention_reference(const AttentionProblem& p, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const Tensor* bias, const Tensor* mask,
                                     Tensor& out, AttentionResiduals* residuals) {
  const Acc inf = std::numeric_limits<Acc>::infinity();
  const AttentionBroadcast bias_at = p.bias ? p.bias_layout() : AttentionBroadcast{};
  const AttentionBroadcast mask_at = p.mask ? p.mask_layout() : AttentionBroadcast{};
  std::vector<Acc> bias_values;
  if (bias) {
    bias_values.resize(static_cast<size_t>(bias->num_elements()));
    for (int64_t e = 0; e < bias->num_elements(); ++e)
      bias_values[e] = static_cast<Acc>(bias->get(e));
  }
  if (residuals) {
    residuals->row_max.assign(static_cast<size_t>(p.B * p.H * p.T), 0.0f);
    residuals->row_sum.assign(static_cast<size_t>(p.B * p.H * p.T), 0.0f);
  }
  std::vector<Acc> logit(static_cast<size_t>(p.t)), acc(static_cast<size_t>(p.d));
  dispatch_float(p.dtype, [&](auto type) {
    using X = decltype(type);
    const X* q_data = q.data<X>();
    const X* k_data = k.data<X>();
    const X* v_data = v.data<X>();
    const bool* mask_data = mask ? mask->data<bool>() : nullptr;
    X* out_data = out.data<X>();
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t r = 0; r < p.T; ++r) {
        const auto [lo, hi] = p.key_range(b, r);
        for (int64_t hq = 0; hq < p.H; ++hq) {
          const int64_t i = hq / p.groups();
          const X* q_row = q_data + ((b * p.T + r) * p.H + hq) * p.D;
          Acc max = -inf;
          for (int64_t j = lo; j < hi; ++j) {
            logit[j] = -inf;
            if (mask_data && !mask_data[mask_at.offset(b, hq, r, j)]) continue;
            const X* k_row = k_data + ((b * p.t + j) * p.h + i) * p.D;
            Acc dot = 0;
            for (int64_t x = 0; x < p.D; ++x) {
              dot += static_cast<Acc>(to_double(q_row[x])) * static_cast<Acc>(to_double(k_row[x]));
            }
            Acc s = static_cast<Acc>(p.logits_scale) * dot;
            if (bias) s += bias_values[bias_at.offset(b, hq, r, j)];
            if (p.logits_soft_cap > 0.0) {
              const Acc cap = static_cast<Acc>(p.logits_soft_cap);
              s = cap * std::tanh(s / cap);
            }
            logit[j] = s;
            max = std::max(max, s);
          }
          std::fill(acc.begin(), acc.end(), Acc(0));
          Acc sum = 0;
          if (max != -inf) {
            for (int64_t j = lo; j < hi; ++j) {
              if (logit[j] == -inf) continue;
              const Acc e = std::exp(logit[j] - max);
              sum += e;
              const X* v_row = v_data + ((b * p.t + j) * p.h + i) * p.d;
              for (int64_t c = 0; c < p.d; ++c) acc[c] += e * static_cast<Acc>(to_double(v_row[c]));
            }
          }
          // No visible key: zeros, not 0/0.
          const Acc inv = sum > 0 ? Acc(1) / sum : Acc(0);
          X* out_row = out_data + ((b * p.T + r) * p.H + hq) * p.d;
          for (int64_t c = 0; c < p.d; ++c) out_row[c] = from_double<X>(acc[c] * inv);
          if (residuals) {
            const int64_t at = (b * p.H + hq) * p.T + r;
            residuals->row_max[at] = static_cast<float>(max);
            residuals->row_sum[at] = static_cast<float>(sum);
          }
        }
      }
    }
  });
}

template void dot_product_attention_reference<float>(const AttentionProblem&, const Tensor&,
                                                     const Tensor&, const Tensor&, const Tensor*,
                                                     const Tensor*, Tensor&, AttentionResiduals*);
template void dot_product_attention_reference<double>(const AttentionProblem&, const Tensor&,
                                                      const Tensor&, const Tensor&, const Tensor*,
                                                      const Tensor*, Tensor&, AttentionResiduals*);

namespace {

void run_reference(const AttentionProblem& problem, const TensorMap& inputs, TensorMap& outputs) {
  Tensor& out = outputs.at("out");
  const Tensor* bias = find_tensor(inputs, "bias");
  const Tensor* mask = find_tensor(inputs, "mask");
  AttentionResiduals residuals;
  AttentionResiduals* wanted = problem.return_residuals ? &residuals : nullptr;
  // Softmax in >= f32: f32 for 16-bit and f32 inputs, f64 for f64 inputs.
  if (problem.dtype == DType::kF64) {
    dot_product_attention_reference<double>(problem, inputs.at("q"), inputs.at("k"), inputs.at("v"),
                                            bias, mask, out, wanted);
  } else {
    dot_product_attention_reference<float>(problem, inputs.at("q"), inputs.at("k"), inputs.at("v"),
                                           bias, mask, out, wanted);
  }
  if (wanted) {
    float* lse = outputs.at("lse").data<float>();
    for (size_t e = 0; e < residuals.row_max.size(); ++e) {
      lse[e] = residuals.row_sum[e] > 0.0f ? residuals.row_max[e] + std::log(residuals.row_sum[e])
                                           : -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace

const Implementation& dot_product_attention_reference_implementation() {
  static const ReferenceImplementation<AttentionProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
