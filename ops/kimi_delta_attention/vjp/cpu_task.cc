// kimi_delta_attention_vjp on CPU: a task's set-up, its token rows and its checkpointing
// forward (cpu_task.h); the backward is in cpu_task_backward.cc.
//
// Dimensions: as ../base.h; C the block (tokens per checkpoint).
#include "ops/kimi_delta_attention/vjp/cpu_task.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "backends/cpu/denormals.h"
#include "ops/common/delta_rule_chunk.h"
#include "ops/common/delta_rule_rows.h"
#include "ops/kimi_delta_attention/cpu_kernel.h"

namespace tokamax {

namespace {

KdaVjpBuffers& thread_buffers() {
  thread_local KdaVjpBuffers buffers;
  return buffers;
}

}  // namespace

KdaVjpTask::KdaVjpTask(const KdaVjpCall& call, int64_t h, int64_t b, float* ddtb)
    : call_(call),
      p_(call.p),
      h_(h),
      b_(b),
      T_(call.p.T),
      K_(call.p.K),
      V_(call.p.V),
      N_(call.p.N),
      KV_(call.p.K * call.p.V),
      C_(call.c.block),
      blocks_((call.p.T + call.c.block - 1) / call.c.block),
      row_floats_(5 * call.p.K + 2 * call.p.V),
      scale_(static_cast<float>(call.p.scale)),
      ddtb_(ddtb),
      buf_(thread_buffers()),
      xs_(static_cast<size_t>(call.c.block)),
      dr_(static_cast<size_t>(call.p.V)),
      passed_(static_cast<size_t>(call.c.block)) {
  buf_.states.resize(static_cast<size_t>(N_ * KV_));
  buf_.adjoints.resize(static_cast<size_t>(N_ * KV_));
  buf_.checkpoints.resize(static_cast<size_t>(blocks_ * N_ * KV_));
  buf_.before.resize(static_cast<size_t>(C_ * KV_));
  buf_.rows.resize(static_cast<size_t>(C_ * row_floats_ + 6 * K_ + 3 * V_));
  bk_ = buf_.rows.data() + C_ * row_floats_;
  pred_ = bk_ + K_;
  o_ = pred_ + V_;
  dg_ = o_ + V_;
  buf_.chunk_rows.resize(static_cast<size_t>(C_ * (6 * K_ + 2 * V_ + 2)));
  cq_ = buf_.chunk_rows.data();
  ck_ = cq_ + C_ * K_;
  cg_ = ck_ + C_ * K_;
  cdq_ = cg_ + C_ * K_;
  cdk_ = cdq_ + C_ * K_;
  cdg_ = cdk_ + C_ * K_;
  cv_ = cdg_ + C_ * K_;
  cdv_ = cv_ + C_ * V_;
  cb_ = cdv_ + C_ * V_;
  cdb_ = cb_ + C_;
  buf_.chunk_slot.assign(static_cast<size_t>(blocks_), -1);
  if (call_.c.chunked) buf_.residuals.resize(static_cast<size_t>(blocks_ * C_ * (V_ + C_)));
  buf_.backward.resize(static_cast<size_t>(C_ * (3 * V_ + 2 * K_) + K_));
}

// Token t's rows into x (its forward quantities but r; the decays d unless `chunk`, which takes
// the log decays instead).
void KdaVjpTask::load(int64_t t, KdaVjpTokenRows& x, bool chunk) const {
  const int64_t row = row_of(t);
  kda_load_row(call_.query, row, K_, x.q);
  kda_load_row(call_.key, row, K_, x.k);
  kda_load_row(call_.gate, row, K_, x.gate);
  kda_load_row(call_.value, row, V_, x.v);
  kda_load_row(call_.beta, row, 1, &x.beta);
  if (p_.use_qk_l2norm) {
    x.nq = std::sqrt(delta_rule_dot(x.q, x.q, K_) + 1e-6f);
    x.nk = std::sqrt(delta_rule_dot(x.k, x.k, K_) + 1e-6f);
  }
  delta_rule_scale(x.q, 1.0f / x.nq, x.qbar, K_);
  delta_rule_scale(x.qbar, scale_, x.q, K_);
  delta_rule_scale(x.k, 1.0f / x.nk, x.k, K_);
  if (!chunk) kda_decay_row(p_, call_.a_log[h_], x.gate, call_.dtb + h_ * K_, K_, x.d);
}

KdaVjpChunk KdaVjpTask::chunk_of(int64_t blk, int64_t len) const {
  float* r0 = buf_.residuals.data() + blk * C_ * (V_ + C_);
  return KdaVjpChunk{.n = len,
                     .K = K_,
                     .V = V_,
                     .q = cq_,
                     .k = ck_,
                     .v = cv_,
                     .g = cg_,
                     .beta = cb_,
                     .U = r0,
                     .Ap = r0 + C_ * V_};
}

// Block [t0, t1)'s rows into xs_ and the chunk's rows when the block can run as one chunk: one
// slot throughout, and gates the factors can take (kda_chunkable, unless `known` from the
// forward's gather); returns the slot, or -1.
int64_t KdaVjpTask::gather(int64_t t0, int64_t t1, bool known) {
  const int64_t n = slot_of(t0), len = t1 - t0;
  if (len < 2 || n < 0) return -1;
  for (int64_t t = t0 + 1; t < t1; ++t) {
    if (slot_of(t) != n) return -1;
  }
  for (int64_t j = 0; j < len; ++j) {
    KdaVjpTokenRows& x = xs_[j];
    x = token_rows(j);
    x.q = cq_ + j * K_;  // q^, k^ and v straight into the chunk's rows
    x.k = ck_ + j * K_;
    x.v = cv_ + j * V_;
    load(t0 + j, x, /*chunk=*/true);
    kda_log_decay_row(p_, call_.a_log[h_], x.gate, call_.dtb + h_ * K_, K_, cg_ + j * K_);
    cb_[j] = x.beta;
  }
  if (!known && !kda_chunkable(cg_, len, K_)) return -1;
  return n;
}

void KdaVjpTask::forward() {
  for (int64_t n = 0; n < N_; ++n) {
    float* S = buf_.states.data() + n * KV_;
    if (call_.init) {
      kda_load_row(*call_.init, (b_ * N_ + n) * p_.H + h_, KV_, S);
    } else {
      std::fill_n(S, KV_, 0.0f);
    }
  }
  // One pass per token, the next token's decay and prediction riding on this one's update when
  // both are on one slot within the block.
  for (int64_t blk = 0; blk < blocks_; ++blk) {
    std::copy_n(buf_.states.data(), N_ * KV_, buf_.checkpoints.data() + blk * N_ * KV_);
    const int64_t t1 = std::min(T_, (blk + 1) * C_);
    if (call_.c.chunked) {  // the block as one chunk, when it can be
      const int64_t n = gather(blk * C_, t1);
      if (n >= 0) {
        buf_.chunk_slot[blk] = n;
        kda_chunk_advance(chunk_of(blk, t1 - blk * C_), buf_.states.data() + n * KV_);
        continue;
      }
    }
    KdaVjpTokenRows cur = token_rows(0), next = token_rows(1);
    bool predicted = false;  // pred holds cur's prediction (and its slot its decay)
    for (int64_t t = blk * C_; t < t1; ++t) {
      const int64_t n = slot_of(t);
      if (n < 0) continue;
      float* S = buf_.states.data() + n * KV_;
      if (!predicted) {
        load(t, cur);
        delta_rule_decay_predict(S, cur.d, cur.k, K_, V_, pred_);
      }
      for (int64_t e = 0; e < V_; ++e) cur.r[e] = cur.v[e] - pred_[e];
      for (int64_t i = 0; i < K_; ++i) bk_[i] = cur.beta * cur.k[i];
      predicted = t + 1 < t1 && slot_of(t + 1) == n;
      if (predicted) {
        load(t + 1, next);
        delta_rule_update_decay(S, bk_, cur.r, cur.q, next.d, next.k, K_, V_, o_, pred_);
        std::swap(cur, next);
      } else {
        delta_rule_update_output(S, bk_, cur.r, cur.q, K_, V_, o_);
      }
    }
  }
}

float kda_vjp_task(const KdaVjpCall& call, int64_t h, int64_t b, float* ddtb) {
  const cpu::ScopedFlushDenormals flush;
  KdaVjpTask task(call, h, b, ddtb);
  task.forward();
  return task.backward();
}

}  // namespace tokamax
