// gated_delta_rule on CPU: the "cpu" implementation's config and kernel: the shared conv, then
// the recurrence token by token with the state's passes vectorized (ops/common/
// delta_rule_rows.h), one task per (request, value head).
//
// Dimensions: as base.h.
#pragma once

#include <string>
#include <tuple>

#include "ops/framework/tensor.h"
#include "ops/gated_delta_rule/base.h"

namespace tokamax {

struct CpuGdnConfig {
  int num_threads = 0;  // 0 = all cores

  void validate() const;
  template <class V>
  void visit(V&& v) {
    v("num_threads", num_threads);
  }
  auto key() const { return std::make_tuple(num_threads); }
};

// The conv and silu of every token (gdn_conv_silu, parallel over requests), then per (request,
// value head) task its state in f32 scratch (the slot's, or zeros without an initial state),
// token by token: S = exp(g) S with pred = k^T S, then S += (beta k) r^T with out = q^T S, the
// next token's decay and prediction riding on this token's pass (one read and write of the
// state per token); the state stored back in its dtype once, after the request's last token.
void gated_delta_rule_cpu_kernel(const GdnProblem& p, const CpuGdnConfig& c,
                                 const TensorMap& inputs,
                                 // Outputs.
                                 TensorMap& outputs);

}  // namespace tokamax
