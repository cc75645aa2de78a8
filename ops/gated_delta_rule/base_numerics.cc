// gated_delta_rule: seeded inputs, the oracle's cost and the error model (the oracle and its
// bound are in oracle.cc).
//
// Dimensions: as base.h.
#include <algorithm>
#include <cmath>

#include "ops/framework/random.h"
#include "ops/gated_delta_rule/base.h"

namespace tokamax {

// qkv, b, a and the conv state ~ N(0, 1); conv_weight ~ N(0, 1 / W) (the conv keeps qkv's
// scale); conv_bias ~ N(0, 0.1); recurrent_state ~ N(0, 0.1); a_log ~ N(-1, 0.5) and dt_bias
// ~ N(0, 0.5), so that exp(g) spreads over about (0.2, 1) as trained layers' decays do.
template <>
TensorMap ProblemOp<GdnProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  const GdnProblem p = GdnProblem::from(args);
  TensorMap inputs;
  for (const char* name : {"qkv", "b", "a", "conv_state"}) {
    inputs.emplace(name, normal_tensor(args.tensor(name), seed, name));
  }
  inputs.emplace("conv_weight",
                 normal_tensor(args.tensor("conv_weight"), seed, "conv_weight",
                               1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(p.W, 1)))));
  if (p.has_conv_bias) {
    inputs.emplace("conv_bias", normal_tensor(args.tensor("conv_bias"), seed, "conv_bias", 0.1));
  }
  inputs.emplace("recurrent_state",
                 normal_tensor(args.tensor("recurrent_state"), seed, "recurrent_state", 0.1));
  inputs.emplace("a_log", normal_tensor(args.tensor("a_log"), seed, "a_log", 0.5, -1.0));
  inputs.emplace("dt_bias", normal_tensor(args.tensor("dt_bias"), seed, "dt_bias", 0.5));
  return inputs;
}

template <>
double ProblemOp<GdnProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  // The recurrence up to a sampled token: every earlier token of its request, per head (samples
  // of one request and head share it, which this ignores).
  const GdnProblem p = GdnProblem::from(args);
  int64_t longest = 1;
  for (int64_t r = 0; r < p.active(); ++r) longest = std::max(longest, p.tokens(r));
  return 8.0 * static_cast<double>(longest) * p.d_k;
}

// The oracle's magnitude is each point's whole error bound in units of the f32 roundoff
// (oracle.cc): length 1; the outputs round once to their dtypes (the coarser of out's and the
// recurrent state's).
template <>
ErrorModel ProblemOp<GdnProblem>::error_model(const BoundArgs& args) const {
  const GdnProblem p = GdnProblem::from(args);
  return ErrorModel{
      .accumulation_roundoff = unit_roundoff(DType::kF32),
      .accumulation_length = 1.0,
      .output_roundoff = std::max(unit_roundoff(p.dtype), unit_roundoff(p.state_dtype))};
}

}  // namespace tokamax
