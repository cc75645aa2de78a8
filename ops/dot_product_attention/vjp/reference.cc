// dot_product_attention_vjp: the portable reference (templated on the accumulator; double is
// the float64 oracle of every gradient) and the "reference" implementation.
//
// Dimensions: as base.h (*B, T, t, H, h, D, d); b, hq, r, j, i = hq / g as there.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/dot_product_attention/range_mask.h"
#include "ops/dot_product_attention/vjp/base.h"
#include "ops/framework/reference_implementation.h"

namespace tokamax {

template <typename Acc>
void dot_product_attention_vjp_reference(const AttentionProblem& p, const Tensor& q,
                                         const Tensor& k, const Tensor& v, const Tensor* bias,
                                         const Tensor* mask, const Tensor& dout, Tensor& dq,
                                         Tensor& dk, Tensor& dv, Tensor* dbias) {
  const Acc inf = std::numeric_limits<Acc>::infinity();
  const AttentionBroadcast bias_at = p.bias ? p.bias_layout() : AttentionBroadcast{};
  const AttentionBroadcast mask_at = p.mask ? p.mask_layout() : AttentionBroadcast{};
  auto load_acc = [](const Tensor& x) {
    std::vector<Acc> out(static_cast<size_t>(x.num_elements()));
    for (int64_t e = 0; e < x.num_elements(); ++e) out[e] = static_cast<Acc>(x.get(e));
    return out;
  };
  const std::vector<Acc> qa = load_acc(q), ka = load_acc(k), va = load_acc(v), da = load_acc(dout);
  const std::vector<Acc> ba = bias ? load_acc(*bias) : std::vector<Acc>{};
  std::vector<Acc> dqa(qa.size(), Acc(0)), dka(ka.size(), Acc(0)), dva(va.size(), Acc(0)),
      dba(ba.size(), Acc(0));
  const Acc scale = static_cast<Acc>(p.logits_scale);
  const Acc cap = static_cast<Acc>(p.logits_soft_cap);
  std::vector<Acc> s(static_cast<size_t>(p.t)), gate(static_cast<size_t>(p.t)),
      pr(static_cast<size_t>(p.t)), ds(static_cast<size_t>(p.t));
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t r = 0; r < p.T; ++r) {
      const auto [lo, hi] = p.key_range(b, r);
      for (int64_t hq = 0; hq < p.H; ++hq) {
        const int64_t i = hq / p.groups();
        const Acc* q_row = &qa[((b * p.T + r) * p.H + hq) * p.D];
        const Acc* dout_row = &da[((b * p.T + r) * p.H + hq) * p.d];
        Acc max = -inf;
        for (int64_t j = lo; j < hi; ++j) {
          s[j] = -inf;
          if (mask && !mask->data<bool>()[mask_at.offset(b, hq, r, j)]) continue;
          if (!p.key_visible(b, hq, r, j)) continue;
          const Acc* k_row = &ka[((b * p.t + j) * p.h + i) * p.D];
          Acc dot = 0;
          for (int64_t x = 0; x < p.D; ++x) dot += q_row[x] * k_row[x];
          Acc z = scale * dot;
          if (bias) z += ba[bias_at.offset(b, hq, r, j)];
          gate[j] = Acc(1);
          if (cap > 0) {
            const Acc th = std::tanh(z / cap);
            z = cap * th;
            gate[j] = Acc(1) - th * th;
          }
          s[j] = z;
          max = std::max(max, z);
        }
        if (max == -inf) continue;  // no visible key: zero output, zero gradients
        Acc sum = 0;
        for (int64_t j = lo; j < hi; ++j) {
          pr[j] = s[j] == -inf ? Acc(0) : std::exp(s[j] - max);
          sum += pr[j];
        }
        Acc Dr = 0;
        for (int64_t j = lo; j < hi; ++j) {
          pr[j] /= sum;
          ds[j] = 0;
          if (pr[j] == Acc(0)) continue;
          const Acc* v_row = &va[((b * p.t + j) * p.h + i) * p.d];
          Acc dP = 0;
          for (int64_t c = 0; c < p.d; ++c) dP += dout_row[c] * v_row[c];
          ds[j] = dP;
          Dr += pr[j] * dP;
        }
        Acc* dq_row = &dqa[((b * p.T + r) * p.H + hq) * p.D];
        for (int64_t j = lo; j < hi; ++j) {
          if (pr[j] == Acc(0)) continue;
          const Acc dS = pr[j] * (ds[j] - Dr) * gate[j];
          if (bias) dba[bias_at.offset(b, hq, r, j)] += dS;
          const Acc* k_row = &ka[((b * p.t + j) * p.h + i) * p.D];
          Acc* dk_row = &dka[((b * p.t + j) * p.h + i) * p.D];
          Acc* dv_row = &dva[((b * p.t + j) * p.h + i) * p.d];
          for (int64_t x = 0; x < p.D; ++x) {
            dq_row[x] += scale * dS * k_row[x];
            dk_row[x] += scale * dS * q_row[x];
          }
          for (int64_t c = 0; c < p.d; ++c) dv_row[c] += pr[j] * dout_row[c];
        }
      }
    }
  }
  auto store = [](const std::vector<Acc>& from, Tensor& to) {
    for (int64_t e = 0; e < to.num_elements(); ++e) to.set(e, static_cast<double>(from[e]));
  };
  store(dqa, dq);
  store(dka, dk);
  store(dva, dv);
  if (dbias) store(dba, *dbias);
}

template void dot_product_attention_vjp_reference<float>(const AttentionProblem&, const Tensor&,
                                                         const Tensor&, const Tensor&,
                                                         const Tensor*, const Tensor*,
                                                         const Tensor&, Tensor&, Tensor&, Tensor&,
                                                         Tensor*);
template void dot_product_attention_vjp_reference<double>(const AttentionProblem&, const Tensor&,
                                                          const Tensor&, const Tensor&,
                                                          const Tensor*, const Tensor*,
                                                          const Tensor&, Tensor&, Tensor&, Tensor&,
                                                          Tensor*);

namespace {

// f32 for 16-bit and f32 inputs, f64 for f64 inputs: as the forward's reference.
DType accumulator(const AttentionProblem& p) {
  return p.dtype == DType::kF64 ? DType::kF64 : DType::kF32;
}

void run_reference(const AttentionVjpProblem& problem, const TensorMap& inputs,
                   TensorMap& outputs) {
  const AttentionProblem p = with_range_mask(problem.fwd, inputs);
  Tensor* dbias = p.bias ? &outputs.at("dbias") : nullptr;
  const auto run = [&](auto acc) {
    using Acc = decltype(acc);
    dot_product_attention_vjp_reference<Acc>(
        p, inputs.at("q"), inputs.at("k"), inputs.at("v"), find_tensor(inputs, "bias"),
        find_tensor(inputs, "mask"), inputs.at("dout"), outputs.at("dq"), outputs.at("dk"),
        outputs.at("dv"), dbias);
  };
  // f32 for 16-bit and f32 inputs, f64 for f64 inputs: as the forward's reference.
  if (accumulator(p) == DType::kF64) {
    run(double{});
  } else {
    run(float{});
  }
}

}  // namespace

const Implementation& dot_product_attention_vjp_reference_implementation() {
  static const ReferenceImplementation<AttentionVjpProblem, run_reference> impl;
  return impl;
}

}  // namespace tokamax
