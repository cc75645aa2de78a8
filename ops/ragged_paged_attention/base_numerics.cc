// ragged_paged_attention: seeded inputs, the oracle's cost and the error model (the oracle is
// in oracle.cc).
#include <algorithm>

#include "ops/framework/random.h"
#include "ops/ragged_paged_attention/base.h"

namespace tokamax {

// queries, keys, values and the whole cache ~ N(0, 1) (the padding lanes and the slots no
// sequence uses too: a kernel reading them shows).
template <>
TensorMap ProblemOp<RaggedPagedAttentionProblem>::make_inputs(const BoundArgs& args,
                                                              uint64_t seed) const {
  TensorMap inputs;
  for (const char* name : {"queries", "keys", "values", "kv_cache"}) {
    inputs.emplace(name, normal_tensor(args.tensor(name), seed, name));
  }
  return inputs;
}

template <>
double ProblemOp<RaggedPagedAttentionProblem>::oracle_cost_per_output(const BoundArgs& args) const {
  // An output row's logits and weighted sum over its sequence's keys.
  const RaggedPagedAttentionProblem p = RaggedPagedAttentionProblem::from(args);
  const int64_t longest = *std::max_element(p.kv_lens.begin(), p.kv_lens.end());
  return 4.0 * static_cast<double>(std::max<int64_t>(longest, 1)) * p.D;
}

// One unit per rounding of the f32 arithmetic, the term counts in each point's magnitude
// (oracle.cc), as dot_product_attention's; the output rounding of the coarsest output (the
// cache, when updated, must match exactly: its oracle magnitude is 0).
template <>
ErrorModel ProblemOp<RaggedPagedAttentionProblem>::error_model(const BoundArgs& args) const {
  const RaggedPagedAttentionProblem p = RaggedPagedAttentionProblem::from(args);
  return ErrorModel{.accumulation_roundoff = unit_roundoff(DType::kF32),
                    .accumulation_length = 1.0,
                    .output_roundoff = unit_roundoff(p.out_dtype)};
}

}  // namespace tokamax
