// kimi_delta_attention_vjp on CPU: one (head, batch row) task of the kernel (cpu_kernel.h says
// what a task computes), apart from the driver that runs the tasks and sums their partials: its
// forward (cpu_task.cc) and its backward (cpu_task_backward.cc).
//
// Dimensions: as ../base.h; C the block (tokens per checkpoint).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/framework/tensor.h"
#include "ops/kimi_delta_attention/vjp/cpu_kernel.h"

namespace tokamax {

// What every task of one call reads and writes, looked up once per call (not per token).
struct KdaVjpCall {
  const KdaProblem& p;
  const CpuKdaVjpConfig& c;
  // Inputs.
  const int32_t* ids = nullptr;    // [B, T] segment ids, or null
  const Tensor* init = nullptr;    // initial_state, or null
  const Tensor* dfinal = nullptr;  // dfinal_state, or null
  const Tensor &query, &key, &gate, &value, &beta, &dout;
  const float* a_log = nullptr;  // [H] (zeros without it)
  const float* dtb = nullptr;    // [H, K] delta_time_bias (zeros without it)
  // Outputs.
  Tensor &dquery, &dkey, &dvalue, &dgate, &dbeta;
  Tensor* dinit = nullptr;  // dinitial_state, or null
};

// One token's forward rows in a block: q^, k^, q / n_q, the raw gate and d [K]; v, r [V]; beta
// and the norms.
struct KdaVjpTokenRows {
  float *q, *k, *qbar, *gate, *d, *v, *r;
  float beta, nq, nk;
};

// A thread's buffers, grown once and reused by its tasks.
struct KdaVjpBuffers {
  // The slots' states and adjoints [N, K, V]; the checkpoints [blocks, N, K, V]; the block's
  // states before each token [C, K, V]; its token rows [C, 5 K + 2 V] and the scratch.
  std::vector<float> states, adjoints, checkpoints, before, rows;
  // A chunk's rows: q^, k^, log decays, dq^, dk^, dg [C, K]; v, dv [C, V]; beta, dbeta [C].
  std::vector<float> chunk_rows;
  // Per chunked block: its slot (-1: token by token), and the forward's residuals U [C, V]
  // and A' [C, C] for its backward (kda_chunk_advance).
  std::vector<int64_t> chunk_slot;
  std::vector<float> residuals;
  // Per token of the block: dout [V], and pass 1's dq^, xr [K] and column sums [V]; dk^ [K].
  std::vector<float> backward;
};

// Task (h, b) of one call, on its thread's KdaVjpBuffers.
class KdaVjpTask {
 public:
  KdaVjpTask(const KdaVjpCall& call, int64_t h, int64_t b, float* ddtb);
  // The forward over the tokens, the states checkpointed at each block's start.
  void forward();
  // The blocks backward from the adjoints of the final states; returns da_log's part.
  float backward();

 private:
  int64_t slot_of(int64_t t) const {
    const int64_t seg = call_.ids ? call_.ids[b_ * T_ + t] : 1;
    return seg < 1 || seg > N_ ? -1 : seg - 1;
  }
  int64_t row_of(int64_t t) const { return (h_ * p_.B + b_) * T_ + t; }
  KdaVjpTokenRows token_rows(int64_t j) const {
    float* base = buf_.rows.data() + j * row_floats_;
    return KdaVjpTokenRows{base,          base + K_,     base + 2 * K_,      base + 3 * K_,
                           base + 4 * K_, base + 5 * K_, base + 5 * K_ + V_, 0.0f,
                           1.0f,          1.0f};
  }
  void load(int64_t t, KdaVjpTokenRows& x, bool chunk = false) const;
  KdaVjpChunk chunk_of(int64_t blk, int64_t len) const;
  int64_t gather(int64_t t0, int64_t t1, bool known = false);
  void finish(const KdaVjpTokenRows& x, const float* log_decay, float* dq, float* dk, float* dg);
  bool backward_chunk(int64_t blk, int64_t t0, int64_t t1);
  void backward_tokens(int64_t t0, int64_t t1);

  const KdaVjpCall& call_;
  const KdaProblem& p_;
  const int64_t h_, b_, T_, K_, V_, N_, KV_, C_, blocks_, row_floats_;
  const float scale_;
  float* ddtb_;
  float da_ = 0.0f;
  KdaVjpBuffers& buf_;
  std::vector<KdaVjpTokenRows> xs_;
  // The chunk's rows (KdaVjpBuffers::chunk_rows).
  float *cq_, *ck_, *cg_, *cdq_, *cdk_, *cdg_, *cv_, *cdv_, *cb_, *cdb_;
  // The token passes' scratch: beta k [K], pred [V], out [V], dg [K].
  float *bk_, *pred_, *o_, *dg_;
  std::vector<float> dr_;
  std::vector<char> passed_;  // pass 1 done (fused into the next token's)
};

// Task (h, b): the forward with its states checkpointed every c.block tokens, then the blocks
// backward; its gradients stored into the call's outputs; returns its part of da_log[h] and
// adds its part of ddelta_time_bias[h] into ddtb [K].
float kda_vjp_task(const KdaVjpCall& call, int64_t h, int64_t b,
                   // Outputs.
                   float* ddtb);

}  // namespace tokamax
