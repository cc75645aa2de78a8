// kimi_delta_attention: seeded inputs, the oracle's cost and the error model (the oracle and
// its bound are in oracle.cc).
//
// Dimensions: as base.h.
#include <algorithm>
#include <cmath>

#include "ops/framework/random.h"
#include "ops/kimi_delta_attention/base.h"

namespace tokamax {

// query and key ~ N(0, 1) under use_qk_l2norm, else N(0, 1 / K) (|k| about 1, so the delta
// rule's step I - beta k k^T stays a contraction, as for trained, normalized keys); value ~
// N(0, 1); beta ~ U(0, 1); the gate a log-decay in (-0.2, 0) (-0.1 softplus of N(0, 1)), or raw
// N(0, 1) under use_gate_in_kernel with a_log ~ N(-2, 1) and delta_time_bias ~ N(0, 1) (the
// activation makes it negative); initial_state ~ N(0, 0.1); segment ids as packed documents of
// 1 to 64 tokens numbered 1.. N, the last eighth of each row padding (0) when T >= 8.
template <>
TensorMap ProblemOp<KdaProblem>::make_inputs(const BoundArgs& args, uint64_t seed) const {
  const KdaProblem p = KdaProblem::from(args);
  TensorMap inputs;
  const double qk_std =
      p.use_qk_l2norm ? 1.0 : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(p.K, 1)));
  inputs.emplace("query", normal_tensor(args.tensor("query"), seed, "query", qk_std));
  inputs.emplace("key", normal_tensor(args.tensor("key"), seed, "key", qk_std));
  inputs.emplace("value", normal_tensor(args.tensor("value"), seed, "value"));
  Tensor gate = normal_tensor(args.tensor("gate"), seed, "gate");
  if (!p.use_gate_in_kernel) {
    for (int64_t e = 0; e < gate.num_elements(); ++e) {
      const double x = gate.get(e);
      gate.set(e, -0.1 * (std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x)))));
    }
  }
  inputs.emplace("gate", std::move(gate));
  Tensor beta(args.tensor("beta"));
  const uint64_t stream = stream_id("beta");
  for (int64_t e = 0; e < beta.num_elements(); ++e) beta.set(e, uniform01(seed, stream, e));
  inputs.emplace("beta", std::move(beta));
  if (args.has("a_log"))
    inputs.emplace("a_log", normal_tensor(args.tensor("a_log"), seed, "a_log", 1.0, -2.0));
  if (args.has("delta_time_bias")) {
    inputs.emplace("delta_time_bias", normal_tensor(args.tensor("delta_time_bias"), seed, "dtb"));
  }
  if (p.has_initial_state) {
    inputs.emplace("initial_state",
                   normal_tensor(args.tensor("initial_state"), seed, "state", 0.1));
  }
  if (p.has_segments) {
    Tensor ids(args.tensor("segment_ids"));
    int32_t* data = ids.data<int32_t>();
    const uint64_t segments = stream_id("segment_ids");
    const int64_t valid = p.T >= 8 ? p.T - p.T / 8 : p.T;
    for (int64_t b = 0; b < p.B; ++b) {
      int32_t id = 1;
      for (int64_t t = 0; t < p.T;) {
        const auto len = 1 + static_cast<int64_t>(64.0 * uniform01(seed, segments, b * p.T + t));
        for (int64_t e = t; e < std::min(p.T, t + len); ++e) {
          data[b * p.T + e] = e < valid ? static_cast<int32_t>((id - 1) % p.N + 1) : 0;
        }
        t += len;
        ++id;
      }
    }
    inputs.emplace("segment_ids", std::move(ids));
  }
  return inputs;
}

template <>
double ProblemOp<KdaProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  // The recurrence up to a sampled token: every earlier token of its head and batch row
  // (samples of one row share it, which this ignores).
  const KdaProblem p = KdaProblem::from(args);
  return 8.0 * static_cast<double>(std::max<int64_t>(p.T, 1)) * p.K;
}

// The oracle's magnitude is each point's whole error bound in units of the f32 roundoff
// (oracle.cc): length 1; the outputs round once to their dtypes.
template <>
ErrorModel ProblemOp<KdaProblem>::error_model(const BoundArgs& args) const {
  const KdaProblem p = KdaProblem::from(args);
  return ErrorModel{.accumulation_roundoff = unit_roundoff(DType::kF32),
                    .accumulation_length = 1.0,
                    .output_roundoff = unit_roundoff(p.dtype)};
}

}  // namespace tokamax
