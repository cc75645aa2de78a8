// ragged_paged_attention: high-level API and the dispatch order of its implementations.
#include "ops/ragged_paged_attention/api.h"

#include <vector>

#include "ops/framework/dispatch.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& ragged_paged_attention_cpu_implementation();
const Implementation& ragged_paged_attention_reference_implementation();

// Fastest first.
template <>
std::vector<const Implementation*> ProblemOp<RaggedPagedAttentionProblem>::implementations() const {
  return {&ragged_paged_attention_cpu_implementation(),
          &ragged_paged_attention_reference_implementation()};
}

const RaggedPagedAttentionOp& ragged_paged_attention_op() {
  static const RaggedPagedAttentionOp op;
  return op;
}

TensorMap ragged_paged_attention(const Tensor& queries, const Tensor& keys, const Tensor& values,
                                 const Tensor& kv_cache,
                                 const RaggedPagedAttentionOptions& options) {
  ApiCall call(ragged_paged_attention_op());
  call.tensor("queries", queries).tensor("keys", keys).tensor("values", values);
  call.tensor("kv_cache", kv_cache);
  for (const auto& [name, value] : options.args.items()) call.option(name, value);
  return call.run(options.implementation, options.config);
}

}  // namespace tokamax
