// kimi_delta_attention on CPU: the "cpu" implementation's config and kernel, the recurrence
// token by token with the state's passes vectorized, one task per (head, batch row).
//
// Dimensions: as base.h.
#pragma once

#include <string>
#include <tuple>

#include "ops/framework/tensor.h"
#include "ops/kimi_delta_attention/base.h"

namespace tokamax {

struct CpuKdaConfig {
  int num_threads = 0;  // 0 = all cores

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("num_threads", num_threads);
  }
  auto key() const { return std::make_tuple(num_threads); }
};

// Per (head, batch row) task, token by token: S = diag(exp g) S with pred = k^T S as it goes,
// then S += (beta k) r^T with out = q^T S as it goes; when the next token uses the same slot, its
// decay and prediction ride on this token's pass (one pass over the state per token). The states
// live in final_state when it is an output (f32 [B, N, H, K, V]), else in the task's scratch.
void kimi_delta_attention_cpu_kernel(const KdaProblem& p, const CpuKdaConfig& c,
                                     const TensorMap& inputs,
                                     // Outputs.
                                     TensorMap& outputs);

// The decays exp(g) of a token's K gate values, g as kda_log_decay (with head h's a_log).
void kda_decay_row(const KdaProblem& p, float a_log,
                   // Inputs.
                   const float* gate,  // [K]
                   const float* bias,  // [K] the head's delta_time_bias (zeros without it)
                   int64_t K,
                   // Outputs.
                   float* decay);  // [K]

}  // namespace tokamax
