// kimi_delta_attention_vjp on CPU: a task's backward (cpu_task.h), block by block from the
// last: as one chunk (cpu_chunk.cc) where the forward ran the block as one, otherwise token by
// token from the states the block's forward recomputes (cpu_rows.cc).
//
// Dimensions: as ../base.h; C the block (tokens per checkpoint).
#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/common/delta_rule_rows.h"
#include "ops/kimi_delta_attention/cpu_kernel.h"
#include "ops/kimi_delta_attention/vjp/cpu_task.h"

namespace tokamax {
namespace {

// n f32 values stored into a tensor's elements [first, first + n) in its dtype (non-temporal
// where aligned: the gradients are written once and not read again by the task).
void store_span(const float* x, int64_t first, int64_t n, Tensor& out) {
  const int64_t size = static_cast<int64_t>(dtype_size(out.dtype()));
  delta_rule_store_state(out.dtype(), x, static_cast<char*>(out.raw()) + first * size, n);
}
// A tensor's elements [first, first + n) set to zero (all bits clear in every float dtype).
void zero_span(int64_t first, int64_t n, Tensor& out) {
  const size_t size = dtype_size(out.dtype());
  std::memset(static_cast<char*>(out.raw()) + first * size, 0, static_cast<size_t>(n) * size);
}
// Row `row` of a tensor of rows of n elements.
void store_row(const float* x, int64_t row, int64_t n, Tensor& out) {
  store_span(x, row * n, n, out);
}

}  // namespace

// A token's dq^, dk^ and dg turned into its query, key and gate gradients in place: through
// the normalization (dx = (dx^ - x^ (x^ . dx^)) / n_x, q^ scaled) and the gate (with the
// token's log decays, or null).
void KdaVjpTask::finish(const KdaVjpTokenRows& x, const float* log_decay, float* dq, float* dk,
                        float* dg) {
  auto unnormalize = [&](const float* xbar, float nx, float s, float* dx) {
    const float dot = p_.use_qk_l2norm ? delta_rule_dot(xbar, dx, K_) : 0.0f;
    const float f = s / nx;
    for (int64_t i = 0; i < K_; ++i) dx[i] = f * (dx[i] - xbar[i] * dot);
  };
  unnormalize(x.qbar, x.nq, scale_, dq);
  unnormalize(x.k, x.nk, 1.0f, dk);
  da_ += kda_vjp_gate_row(p_, call_.a_log[h_], x.gate, call_.dtb + h_ * K_, log_decay, dg, K_, dg,
                          ddtb_);
}

// Block [t0, t1) backward as one chunk, when the forward ran it as one.
bool KdaVjpTask::backward_chunk(int64_t blk, int64_t t0, int64_t t1) {
  const int64_t n = buf_.chunk_slot[blk], len = t1 - t0;
  if (n < 0) return false;
  gather(t0, t1, /*known=*/true);
  float* douts = buf_.backward.data();
  for (int64_t j = 0; j < len; ++j) kda_load_row(call_.dout, row_of(t0 + j), V_, douts + j * V_);
  KdaVjpChunk chunk = chunk_of(blk, len);
  chunk.S0 = buf_.checkpoints.data() + (blk * N_ + n) * KV_;
  chunk.dout = douts;
  kda_vjp_chunk(chunk, buf_.adjoints.data() + n * KV_, cdq_, cdk_, cdv_, cdb_, cdg_);
  for (int64_t j = 0; j < len; ++j) {
    finish(xs_[j], cg_ + j * K_, cdq_ + j * K_, cdk_ + j * K_, cdg_ + j * K_);
  }
  // The block's rows are adjacent in every gradient: one store each.
  const int64_t row = row_of(t0);
  store_span(cdv_, row * V_, len * V_, call_.dvalue);
  store_span(cdq_, row * K_, len * K_, call_.dquery);
  store_span(cdk_, row * K_, len * K_, call_.dkey);
  store_span(cdg_, row * K_, len * K_, call_.dgate);
  store_span(cdb_, row, len, call_.dbeta);
  return true;
}

// Block [t0, t1) backward token by token from the states before its tokens, which the block's
// forward recomputes from its checkpoint (in buf_.states) in fused passes.
void KdaVjpTask::backward_tokens(int64_t t0, int64_t t1) {
  float* douts = buf_.backward.data();
  float* dqhs = douts + C_ * V_;
  float* xrs = dqhs + C_ * K_;
  float* accs = xrs + C_ * K_;
  float* dkh = accs + C_ * V_;  // [K]
  bool predicted = false;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n = slot_of(t);
    if (n < 0) continue;
    KdaVjpTokenRows& x = xs_[t - t0];
    float* S = buf_.states.data() + n * KV_;
    if (!predicted) {
      x = token_rows(t - t0);
      load(t, x);
      delta_rule_decay_predict(S, x.d, x.k, K_, V_, pred_, buf_.before.data() + (t - t0) * KV_);
    }
    for (int64_t e = 0; e < V_; ++e) x.r[e] = x.v[e] - pred_[e];
    for (int64_t i = 0; i < K_; ++i) bk_[i] = x.beta * x.k[i];
    predicted = t + 1 < t1 && slot_of(t + 1) == n;
    if (predicted) {
      KdaVjpTokenRows& next = xs_[t + 1 - t0];
      next = token_rows(t + 1 - t0);
      load(t + 1, next);
      delta_rule_update_decay(S, bk_, x.r, x.q, next.d, next.k, K_, V_, o_, pred_,
                              buf_.before.data() + (t + 1 - t0) * KV_);
    } else {
      delta_rule_update_output(S, bk_, x.r, x.q, K_, V_, o_);
    }
    kda_load_row(call_.dout, row_of(t), V_, douts + (t - t0) * V_);
    passed_[t - t0] = 0;
  }
  auto token_of = [&](int64_t t) {
    const KdaVjpTokenRows& x = xs_[t - t0];
    return KdaVjpToken{x.q, x.k, x.d, x.r, douts + (t - t0) * V_, x.beta};
  };
  for (int64_t t = t1 - 1; t >= t0; --t) {
    const int64_t n = slot_of(t);
    if (n < 0) continue;
    const KdaVjpTokenRows& x = xs_[t - t0];
    const int64_t j = t - t0;
    const KdaVjpToken tok = token_of(t);
    const float* Sd = buf_.before.data() + j * KV_;
    float* G = buf_.adjoints.data() + n * KV_;
    if (!passed_[j]) kda_vjp_pass1(tok, Sd, G, K_, V_, dqhs + j * K_, accs + j * V_, xrs + j * K_);
    const float* xr = xrs + j * K_;
    float dbeta = 0.0f;
    for (int64_t e = 0; e < V_; ++e) dr_[e] = x.beta * accs[j * V_ + e];
    for (int64_t i = 0; i < K_; ++i) {
      dbeta += x.k[i] * xr[i];
      dkh[i] = x.beta * xr[i];
    }
    if (t > t0 && slot_of(t - 1) == n) {  // the token before on this slot: fused
      kda_vjp_pass2_pass1(tok, Sd, G, dr_.data(), token_of(t - 1), Sd - KV_, K_, V_, dkh, dg_,
                          dqhs + (j - 1) * K_, accs + (j - 1) * V_, xrs + (j - 1) * K_);
      passed_[j - 1] = 1;
    } else {
      kda_vjp_pass2(tok, Sd, G, dr_.data(), K_, V_, dkh, dg_);
    }
    finish(x, nullptr, dqhs + j * K_, dkh, dg_);
    const int64_t row = row_of(t);
    store_row(dr_.data(), row, V_, call_.dvalue);
    store_row(dqhs + j * K_, row, K_, call_.dquery);
    store_row(dkh, row, K_, call_.dkey);
    store_row(dg_, row, K_, call_.dgate);
    call_.dbeta.set(row, dbeta);
  }
}

float KdaVjpTask::backward() {
  // Padding tokens' gradients are zeros (every other token's rows are written below).
  for (int64_t t = 0; t < T_; ++t) {
    if (slot_of(t) >= 0) continue;
    const int64_t row = row_of(t);
    for (Tensor* out : {&call_.dquery, &call_.dkey, &call_.dgate}) zero_span(row * K_, K_, *out);
    zero_span(row * V_, V_, call_.dvalue);
    zero_span(row, 1, call_.dbeta);
  }
  for (int64_t n = 0; n < N_; ++n) {
    float* G = buf_.adjoints.data() + n * KV_;
    if (call_.dfinal) {
      kda_load_row(*call_.dfinal, (b_ * N_ + n) * p_.H + h_, KV_, G);
    } else {
      std::fill_n(G, KV_, 0.0f);
    }
  }
  for (int64_t blk = blocks_ - 1; blk >= 0; --blk) {
    const int64_t t0 = blk * C_, t1 = std::min(T_, t0 + C_);
    if (call_.c.chunked && backward_chunk(blk, t0, t1)) continue;
    std::copy_n(buf_.checkpoints.data() + blk * N_ * KV_, N_ * KV_, buf_.states.data());
    backward_tokens(t0, t1);
  }
  if (call_.dinit) {
    for (int64_t n = 0; n < N_; ++n) {
      store_row(buf_.adjoints.data() + n * KV_, (b_ * N_ + n) * p_.H + h_, KV_, *call_.dinit);
    }
  }
  return da_;
}

}  // namespace tokamax
