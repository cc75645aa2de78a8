// kimi_delta_attention on CPU: a token's decays exp(g) (cpu_kernel.h), compiled once per SIMD
// target by Highway; the state's passes are the shared delta rule's (ops/common/
// delta_rule_rows.h).
//
// Dimensions: as base.h; L the f32 lanes of the target.
#include <cmath>
#include <cstdint>

#include "ops/kimi_delta_attention/cpu_kernel.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kimi_delta_attention/cpu_rows.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// decay = exp(g) (or g itself, `log`) of a token's K gate values, g as kda_log_decay (the gate
// itself, -A softplus(gate + bias), or lower_bound sigmoid(A (gate + bias))), vectorized; the tail
// by kda_log_decay itself.
void DecayRow(const KdaProblem& p, float a_log, const float* gate, const float* bias, int64_t K,
              bool log, float* decay) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const float A = std::exp(a_log);
  const auto a = hn::Set(d, A), one = hn::Set(d, 1.0f);
  const auto lb = hn::Set(d, p.lower_bound ? static_cast<float>(*p.lower_bound) : 0.0f);
  int64_t i = 0;
  for (; i + L <= K; i += L) {
    auto g = hn::LoadU(d, gate + i);
    if (p.use_gate_in_kernel) g = hn::Add(g, hn::LoadU(d, bias + i));
    auto x = g;
    if (p.use_gate_in_kernel && p.lower_bound) {
      x = hn::Div(lb, hn::Add(one, hn::Exp(d, hn::Neg(hn::Mul(a, g)))));
    } else if (p.use_gate_in_kernel) {
      const auto sp =
          hn::Add(hn::Max(g, hn::Zero(d)), hn::Log1p(d, hn::Exp(d, hn::Neg(hn::Abs(g)))));
      x = hn::Neg(hn::Mul(a, sp));
    }
    hn::StoreU(log ? x : hn::Exp(d, x), d, decay + i);
  }
  for (; i < K; ++i) {
    const float g = kda_log_decay<float>(p, gate[i], a_log, bias[i]);
    decay[i] = log ? g : std::exp(g);
  }
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(DecayRow);

void kda_decay_row(const KdaProblem& p, float a_log, const float* gate, const float* bias,
                   int64_t K, float* decay) {
  HWY_DYNAMIC_DISPATCH(DecayRow)(p, a_log, gate, bias, K, /*log=*/false, decay);
}

void kda_log_decay_row(const KdaProblem& p, float a_log, const float* gate, const float* bias,
                       int64_t K, float* g) {
  HWY_DYNAMIC_DISPATCH(DecayRow)(p, a_log, gate, bias, K, /*log=*/true, g);
}

}  // namespace tokamax
#endif  // HWY_ONCE
