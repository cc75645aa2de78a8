// dot_product_attention: the portable reference, templated on the accumulator (Acc = double is
// exact to the float64 oracle's rounding), and the "reference" implementation that runs it.
//
// Dimensions: as base.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/dot_product_attention/base.h"
#include "ops/dot_product_attention/range_mask.h"
#include "ops/framework/errors.h"
#include "ops/framework/random.h"
#include "ops/framework/reference_implementation.h"

namespace tokamax {

template <typename Acc>
void dot_product_attention_reference(const AttentionProblem& p, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const Tensor* bias, const Tensor* mask,
                                     Tensor& out, AttentionResiduals* residuals,
                                     const Tensor* dropout_mask) {
  const Acc inf = std::numeric_limits<Acc>::infinity();
  const AttentionBroadcast bias_at = p.bias ? p.bias_layout() : AttentionBroadcast{};
  const AttentionBroadcast mask_at = p.mask ? p.mask_layout() : AttentionBroadcast{};
  const AttentionBroadcast drop_at = dropout_mask ? p.dropout_layout() : AttentionBroadcast{};
  const Acc drop_scale = static_cast<Acc>(p.dropout_scale());
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
            if (!p.key_visible(b, hq, r, j)) continue;
            const X* k_row = k_data + ((b * p.t + j) * p.h + i) * p.D;
            Acc dot = 0;
            for (int64_t x = 0; x < p.D; ++x) {
              dot += static_cast<Acc>(to_double(q_row[x])) * static_cast<Acc>(to_double(k_row[x]));
            }
            // Upstream's logits_dtype bf16 (the f32 reference only; Acc = double is the exact
            // oracle): each step's result rounded to bf16, as its XLA path computes on bf16
            // arrays.
            const bool narrow = std::is_same_v<Acc, float> && p.bf16_logits;
            auto round = [&](Acc x) {
              return narrow ? static_cast<Acc>(bf16_to_float(float_to_bf16(static_cast<float>(x))))
                            : x;
            };
            Acc s = round(static_cast<Acc>(p.logits_scale) * round(dot));
            if (bias) s = round(s + bias_values[bias_at.offset(b, hq, r, j)]);
            if (p.logits_soft_cap > 0.0) {
              const Acc cap = static_cast<Acc>(p.logits_soft_cap);
              s = round(cap * round(std::tanh(round(s / cap))));
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
              // Dropout after the denominator: the weight times keep / (1 - rate).
              const Acc w = !dropout_mask ? e
                            : dropout_mask->data<bool>()[drop_at.offset(b, hq, r, j)]
                                ? e * drop_scale
                                : Acc(0);
              const X* v_row = v_data + ((b * p.t + j) * p.h + i) * p.d;
              for (int64_t c = 0; c < p.d; ++c) acc[c] += w * static_cast<Acc>(to_double(v_row[c]));
            }
          }
          // No visible key: zeros, not 0/0.
          const Acc inv = sum > 0 ? (p.normalize_output ? Acc(1) / sum : Acc(1)) : Acc(0);
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
                                                     const Tensor*, Tensor&, AttentionResiduals*,
                                                     const Tensor*);
template void dot_product_attention_reference<double>(const AttentionProblem&, const Tensor&,
                                                      const Tensor&, const Tensor&, const Tensor*,
                                                      const Tensor*, Tensor&, AttentionResiduals*,
                                                      const Tensor*);

namespace {

void run_reference(const AttentionProblem& fwd, const TensorMap& inputs, TensorMap& outputs) {
  const AttentionProblem problem = with_range_mask(fwd, inputs);
  Tensor& out = outputs.at("out");
  const Tensor* bias = find_tensor(inputs, "bias");
  const Tensor* mask = find_tensor(inputs, "mask");
  const Tensor* dropout = problem.dropout_mask ? find_tensor(inputs, "dropout_mask") : nullptr;
  AttentionResiduals residuals;
  AttentionResiduals* wanted = problem.return_residuals ? &residuals : nullptr;
  // Softmax in >= f32: f32 for 16-bit and f32 inputs, f64 for f64 inputs.
  if (problem.dtype == DType::kF64) {
    dot_product_attention_reference<double>(problem, inputs.at("q"), inputs.at("k"), inputs.at("v"),
                                            bias, mask, out, wanted, dropout);
  } else {
    dot_product_attention_reference<float>(problem, inputs.at("q"), inputs.at("k"), inputs.at("v"),
                                           bias, mask, out, wanted, dropout);
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
