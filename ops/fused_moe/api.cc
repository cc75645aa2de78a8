// fused_moe: high-level API and the dispatch order of its implementations.
#include "ops/fused_moe/api.h"

#include <cmath>
#include <string>

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& fused_moe_cpu_implementation();
const Implementation& fused_moe_composite_implementation();
const Implementation& fused_moe_onednn_implementation();
const Implementation& fused_moe_reference_implementation();

// Fastest first.
template <>
std::vector<const Implementation*> ProblemOp<FusedMoeProblem>::implementations() const {
  return {&fused_moe_cpu_implementation(), &fused_moe_composite_implementation(),
          &fused_moe_onednn_implementation(), &fused_moe_reference_implementation()};
}

const FusedMoeOp& fused_moe_op() {
  static const FusedMoeOp op;
  return op;
}

Tensor fused_moe(const Tensor& x, const Tensor& w1, const Tensor& w2, const Tensor& gating,
                 const FusedMoeOptions& options) {
  ApiCall call(fused_moe_op());
  call.tensor("x", x)
      .tensor("w1", w1)
      .tensor("w2", w2)
      .tensor("gating", gating)
      .tensor("w1_bias", options.w1_bias)
      .tensor("w2_bias", options.w2_bias)
      .option("topk", options.topk)
      .option("renormalize", options.renormalize)
      .option("act_fn", options.act_fn);
  const BoundArgs args = call.bind();
  // The values bind cannot see: the router orders every logit, and softmax needs a finite one
  // per row (a row of -inf has no distribution; -inf alone is a masked expert, weight 0).
  const FusedMoeProblem p = FusedMoeProblem::from(args);
  for (int64_t t = 0; t < p.T; ++t) {
    bool finite = false;
    for (int64_t e = 0; e < p.E; ++e) {
      const double logit = gating.get(t * p.E + e);
      if (std::isnan(logit) || logit == INFINITY) {
        throw InvalidArgument("fused_moe: gating[" + std::to_string(t) + ", " + std::to_string(e) +
                                  "] = " + std::to_string(logit) +
                                  " (router logits must be finite or -inf)",
                              "gating");
      }
      finite = finite || std::isfinite(logit);
    }
    if (!finite) {
      throw InvalidArgument("fused_moe: gating row " + std::to_string(t) +
                                " has no finite logit (softmax over it is undefined)",
                            "gating");
    }
  }
  return call.run(args, options.implementation, options.config).at("out");
}

}  // namespace tokamax
