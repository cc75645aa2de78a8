// kimi_delta_attention_vjp: seeded inputs, the oracle's cost and the error model (the bounds
// themselves are sweep.h's).
//
// Dimensions: as base.h.
#include <algorithm>

#include "ops/framework/random.h"
#include "ops/framework/vjp.h"
#include "ops/kimi_delta_attention/api.h"
#include "ops/kimi_delta_attention/vjp/base.h"

namespace tokamax {

// The forward's inputs, the cotangents dout (and dfinal_state) ~ N(0, 1).
template <>
TensorMap ProblemOp<KdaVjpProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  const KdaOp& fwd = kimi_delta_attention_op();
  BoundArgs forward = primal_args(fwd, args, cotangents());
  forward.args.erase("dfinal_state");
  TensorMap inputs = fwd.make_inputs(forward, seed);
  inputs.emplace("dout", normal_tensor(args.tensor("dout"), seed, "dout"));
  if (args.has("dfinal_state")) {
    inputs.emplace("dfinal_state", normal_tensor(args.tensor("dfinal_state"), seed, "dstate"));
  }
  return inputs;
}

template <>
double ProblemOp<KdaVjpProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  // A sample's whole (head, batch row) forward and backward (samples of one row share them,
  // which this ignores).
  const KdaProblem p = KdaVjpProblem::from(args).fwd;
  return 30.0 * static_cast<double>(std::max<int64_t>(p.T, 1)) * p.K;
}

// The oracle's magnitude is each point's whole error bound in units of the f32 roundoff: length
// 1; the outputs round once to their dtypes.
template <>
ErrorModel ProblemOp<KdaVjpProblem>::error_model(const BoundArgs& args) const {
  const KdaProblem p = KdaVjpProblem::from(args).fwd;
  return ErrorModel{.accumulation_roundoff = unit_roundoff(DType::kF32),
                    .accumulation_length = 1.0,
                    .output_roundoff = unit_roundoff(p.dtype)};
}

}  // namespace tokamax
