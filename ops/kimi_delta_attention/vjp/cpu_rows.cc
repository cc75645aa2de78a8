// kimi_delta_attention_vjp on CPU: the two passes of one token's backward over its slot's
// state and adjoint (cpu_kernel.h), compiled once per SIMD target by Highway. Rows go one at a
// time with their V columns in vectors: each row's sums reduce once, the column sums (dr)
// accumulate in an L1-resident row.
//
// Dimensions: as ../base.h; L the f32 lanes of the target.
#include <cmath>
#include <cstdint>

#include "ops/kimi_delta_attention/vjp/cpu_kernel.h"
#include "ops/kimi_delta_attention/vjp/sweep.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/kimi_delta_attention/vjp/cpu_rows.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Pass 1, per row i with S_t = S'_i + bk_i r:
//   dq^_i = S_t,i . dout;  G_i += q_i dout;  acc_dr += k_i G_i;  x_i = G_i . r.
void BackwardPass1(const KdaVjpToken& x, const float* Sd, float* G, int64_t K, int64_t V, float* dq,
                   float* acc_dr, float* xr) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t c = 0; c < V; ++c) acc_dr[c] = 0.0f;
  for (int64_t i = 0; i < K; ++i) {
    const float* s = Sd + i * V;
    float* g = G + i * V;
    const auto bki = hn::Set(d, x.beta * x.k[i]);
    const auto qi = hn::Set(d, x.q[i]), ki = hn::Set(d, x.k[i]);
    auto sum_q = hn::Zero(d), sum_x = hn::Zero(d);
    int64_t c = 0;
    for (; c + L <= V; c += L) {
      const auto dout = hn::LoadU(d, x.dout + c), r = hn::LoadU(d, x.r + c);
      const auto st = hn::MulAdd(bki, r, hn::LoadU(d, s + c));
      sum_q = hn::MulAdd(st, dout, sum_q);
      const auto gv = hn::MulAdd(qi, dout, hn::LoadU(d, g + c));
      hn::StoreU(gv, d, g + c);
      hn::StoreU(hn::MulAdd(ki, gv, hn::LoadU(d, acc_dr + c)), d, acc_dr + c);
      sum_x = hn::MulAdd(gv, r, sum_x);
    }
    float q_sum = hn::GetLane(hn::SumOfLanes(d, sum_q));
    float x_sum = hn::GetLane(hn::SumOfLanes(d, sum_x));
    for (; c < V; ++c) {
      const float st = s[c] + x.beta * x.k[i] * x.r[c];
      q_sum += st * x.dout[c];
      g[c] += x.q[i] * x.dout[c];
      acc_dr[c] += x.k[i] * g[c];
      x_sum += g[c] * x.r[c];
    }
    dq[i] = q_sum;
    xr[i] = x_sum;
  }
}

// Pass 2, per row i: dk_i -= S'_i . dr;  G'_i = G_i - k_i dr;  dg_i = G'_i . S'_i;
// G_i = d_i G'_i.
void BackwardPass2(const KdaVjpToken& x, const float* Sd, float* G, const float* dr, int64_t K,
                   int64_t V, float* dk, float* dg) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < K; ++i) {
    const float* s = Sd + i * V;
    float* g = G + i * V;
    const auto di = hn::Set(d, x.d[i]), ki = hn::Set(d, x.k[i]);
    auto sum_k = hn::Zero(d), sum_g = hn::Zero(d);
    int64_t c = 0;
    for (; c + L <= V; c += L) {
      const auto sp = hn::LoadU(d, s + c);
      const auto drv = hn::LoadU(d, dr + c);
      sum_k = hn::MulAdd(sp, drv, sum_k);
      const auto gp = hn::NegMulAdd(ki, drv, hn::LoadU(d, g + c));
      sum_g = hn::MulAdd(gp, sp, sum_g);
      hn::StoreU(hn::Mul(di, gp), d, g + c);
    }
    float k_sum = hn::GetLane(hn::SumOfLanes(d, sum_k));
    float g_sum = hn::GetLane(hn::SumOfLanes(d, sum_g));
    for (; c < V; ++c) {
      const float sp = s[c];
      k_sum += sp * dr[c];
      const float gp = g[c] - x.k[i] * dr[c];
      g_sum += gp * sp;
      g[c] = x.d[i] * gp;
    }
    dk[i] -= k_sum;
    dg[i] = g_sum;
  }
}

// Pass 2 of token t and pass 1 of token t - 1 (same slot) in one sweep over the rows: row i's
// adjoint, finished for token t (G_i = d_t,i (G_i - k_t,i dr_t)), is at once token t - 1's.
void BackwardFused(const KdaVjpToken& x, const float* Sd, float* G, const float* dr,
                   const KdaVjpToken& xp, const float* Sdp, int64_t K, int64_t V, float* dk,
                   float* dg, float* dqp, float* acc_drp, float* xrp) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t c = 0; c < V; ++c) acc_drp[c] = 0.0f;
  for (int64_t i = 0; i < K; ++i) {
    const float* s = Sd + i * V;
    const float* sp_prev = Sdp + i * V;
    float* g = G + i * V;
    const auto di = hn::Set(d, x.d[i]), ki = hn::Set(d, x.k[i]);
    const auto bkp = hn::Set(d, xp.beta * xp.k[i]), qp = hn::Set(d, xp.q[i]);
    const auto kp = hn::Set(d, xp.k[i]);
    auto sum_k = hn::Zero(d), sum_g = hn::Zero(d), sum_q = hn::Zero(d), sum_x = hn::Zero(d);
    int64_t c = 0;
    for (; c + L <= V; c += L) {
      const auto sp = hn::LoadU(d, s + c);
      const auto drv = hn::LoadU(d, dr + c);
      sum_k = hn::MulAdd(sp, drv, sum_k);
      const auto gp = hn::NegMulAdd(ki, drv, hn::LoadU(d, g + c));
      sum_g = hn::MulAdd(gp, sp, sum_g);
      const auto doutp = hn::LoadU(d, xp.dout + c), rp = hn::LoadU(d, xp.r + c);
      const auto st = hn::MulAdd(bkp, rp, hn::LoadU(d, sp_prev + c));
      sum_q = hn::MulAdd(st, doutp, sum_q);
      const auto gv = hn::MulAdd(qp, doutp, hn::Mul(di, gp));
      hn::StoreU(gv, d, g + c);
      hn::StoreU(hn::MulAdd(kp, gv, hn::LoadU(d, acc_drp + c)), d, acc_drp + c);
      sum_x = hn::MulAdd(gv, rp, sum_x);
    }
    float k_sum = hn::GetLane(hn::SumOfLanes(d, sum_k));
    float g_sum = hn::GetLane(hn::SumOfLanes(d, sum_g));
    float q_sum = hn::GetLane(hn::SumOfLanes(d, sum_q));
    float x_sum = hn::GetLane(hn::SumOfLanes(d, sum_x));
    for (; c < V; ++c) {
      k_sum += s[c] * dr[c];
      const float gp = g[c] - x.k[i] * dr[c];
      g_sum += gp * s[c];
      const float st = sp_prev[c] + xp.beta * xp.k[i] * xp.r[c];
      q_sum += st * xp.dout[c];
      g[c] = x.d[i] * gp + xp.q[i] * xp.dout[c];
      acc_drp[c] += xp.k[i] * g[c];
      x_sum += g[c] * xp.r[c];
    }
    dk[i] -= k_sum;
    dg[i] = g_sum;
    dqp[i] = q_sum;
    xrp[i] = x_sum;
  }
}

// dgate = dg dg/dx per channel (x the gate value), ddtb += dgate, and returns sum dg dg/da_log,
// as kda_log_decay_grad: the gate itself, -A softplus(x + bias), or lb sigmoid(A (x + bias)).
float GateRow(const KdaProblem& p, float a_log, const float* gate, const float* bias,
              const float* log_decay, const float* dg, int64_t K, float* dgate, float* ddtb) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  if (!p.use_gate_in_kernel) {
    for (int64_t i = 0; i < K; ++i) dgate[i] = dg[i];
    return 0.0f;
  }
  const float A = std::exp(a_log);
  const auto a = hn::Set(d, A), one = hn::Set(d, 1.0f);
  const auto lb = hn::Set(d, p.lower_bound ? static_cast<float>(*p.lower_bound) : 0.0f);
  auto da = hn::Zero(d);
  int64_t i = 0;
  for (; i + L <= K; i += L) {
    const auto x = hn::Add(hn::LoadU(d, gate + i), hn::LoadU(d, bias + i));
    const auto g = hn::LoadU(d, dg + i);
    hn::Vec<decltype(d)> dx, dalog;
    if (p.lower_bound) {
      const auto s = hn::Div(one, hn::Add(one, hn::Exp(d, hn::Neg(hn::Mul(a, x)))));
      dx = hn::Mul(hn::Mul(lb, hn::Mul(s, hn::Sub(one, s))), a);
      dalog = hn::Mul(dx, x);
    } else {
      const auto s = hn::Div(one, hn::Add(one, hn::Exp(d, hn::Neg(x))));
      dx = hn::Neg(hn::Mul(a, s));
      if (log_decay) {
        dalog = hn::LoadU(d, log_decay + i);
      } else {
        const auto sp =
            hn::Add(hn::Max(x, hn::Zero(d)), hn::Log1p(d, hn::Exp(d, hn::Neg(hn::Abs(x)))));
        dalog = hn::Neg(hn::Mul(a, sp));
      }
    }
    const auto out = hn::Mul(g, dx);
    hn::StoreU(out, d, dgate + i);
    hn::StoreU(hn::Add(hn::LoadU(d, ddtb + i), out), d, ddtb + i);
    da = hn::MulAdd(g, dalog, da);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, da));
  for (; i < K; ++i) {
    float dg_dx = 0.0f, dg_da = 0.0f;
    kda_log_decay_grad<float>(p, gate[i], a_log, bias[i], dg_dx, dg_da);
    const float g = dg[i];  // dgate may be dg
    dgate[i] = g * dg_dx;
    ddtb[i] += dgate[i];
    sum += g * dg_da;
  }
  return sum;
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(BackwardPass1);
HWY_EXPORT(BackwardPass2);
HWY_EXPORT(GateRow);
HWY_EXPORT(BackwardFused);

void kda_vjp_pass2_pass1(const KdaVjpToken& x, const float* Sd, float* G, const float* dr,
                         const KdaVjpToken& prev, const float* Sd_prev, int64_t K, int64_t V,
                         float* dk, float* dg, float* dq_prev, float* acc_dr_prev, float* xr_prev) {
  HWY_DYNAMIC_DISPATCH(BackwardFused)
  (x, Sd, G, dr, prev, Sd_prev, K, V, dk, dg, dq_prev, acc_dr_prev, xr_prev);
}

float kda_vjp_gate_row(const KdaProblem& p, float a_log, const float* gate, const float* bias,
                       const float* log_decay, const float* dg, int64_t K, float* dgate,
                       float* ddtb) {
  return HWY_DYNAMIC_DISPATCH(GateRow)(p, a_log, gate, bias, log_decay, dg, K, dgate, ddtb);
}

void kda_vjp_pass1(const KdaVjpToken& x, const float* Sd, float* G, int64_t K, int64_t V, float* dq,
                   float* acc_dr, float* xr) {
  HWY_DYNAMIC_DISPATCH(BackwardPass1)(x, Sd, G, K, V, dq, acc_dr, xr);
}

void kda_vjp_pass2(const KdaVjpToken& x, const float* Sd, float* G, const float* dr, int64_t K,
                   int64_t V, float* dk, float* dg) {
  HWY_DYNAMIC_DISPATCH(BackwardPass2)(x, Sd, G, dr, K, V, dk, dg);
}

}  // namespace tokamax
#endif  // HWY_ONCE
