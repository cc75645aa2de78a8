// splash_attention: seeded inputs, the oracle's cost and the error model (the oracle is in
// oracle.cc).
//
// Dimensions: as base.h.
#include <algorithm>

#include "ops/framework/random.h"
#include "ops/splash_attention/base.h"

namespace tokamax {

// q, k, v and sinks ~ N(0, 1); segment ids as packed documents: positions 0.. max(T, t) cut
// into runs of 1 to 24 tokens (ids 1, 2, ...), q taking the first T and kv the first t, so
// T = t gives self-attention over the same documents.
template <>
TensorMap ProblemOp<SplashAttentionProblem>::make_inputs(const BoundArgs& args,
                                                         uint64_t seed) const {
  const SplashAttentionProblem p = SplashAttentionProblem::from(args);
  TensorMap inputs;
  for (const char* name : {"q", "k", "v"}) {
    inputs.emplace(name, normal_tensor(args.tensor(name), seed, name));
  }
  if (p.has_sinks) inputs.emplace("sinks", normal_tensor(args.tensor("sinks"), seed, "sinks"));
  if (p.has_segments) {
    const int64_t n = std::max(p.T, p.t);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    int32_t id = 1;
    for (int64_t at = 0; at < n;) {
      const auto len = 1 + static_cast<int64_t>(24.0 * uniform01(seed, stream_id("segments"), at));
      for (int64_t i = at; i < std::min(n, at + len); ++i) ids[i] = id;
      at += len;
      ++id;
    }
    for (const auto& [name, len] :
         {std::pair{"q_segment_ids", p.T}, std::pair{"kv_segment_ids", p.t}}) {
      Tensor tensor(args.tensor(name));
      std::copy_n(ids.begin(), len, tensor.data<int32_t>());
      inputs.emplace(name, std::move(tensor));
    }
  }
  return inputs;
}

template <>
double ProblemOp<SplashAttentionProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  // An output row's logits over every key and its weighted sum.
  const SplashAttentionProblem p = SplashAttentionProblem::from(args);
  return 2.0 * static_cast<double>(std::max<int64_t>(p.t, 1)) * (p.D + p.d);
}

// One unit per rounding of the f32 arithmetic, the term counts in each point's magnitude
// (oracle.cc), as dot_product_attention's; out's rounding to its dtype.
template <>
ErrorModel ProblemOp<SplashAttentionProblem>::error_model(const BoundArgs& args) const {
  const SplashAttentionProblem p = SplashAttentionProblem::from(args);
  return ErrorModel{.accumulation_roundoff = unit_roundoff(DType::kF32),
                    .accumulation_length = 1.0,
                    .output_roundoff = unit_roundoff(p.dtype)};
}

}  // namespace tokamax
