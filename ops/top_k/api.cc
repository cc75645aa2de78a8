// top_k: high-level API and the dispatch order of its implementations.
#include "ops/top_k/api.h"

#include "ops/framework/dispatch.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& top_k_cpu_implementation();
const Implementation& top_k_reference_implementation();

// Fastest first.
template <>
std::vector<const Implementation*> ProblemOp<TopKProblem>::implementations() const {
  return {&top_k_cpu_implementation(), &top_k_reference_implementation()};
}

const TopKOp& top_k_op() {
  static const TopKOp op;
  return op;
}

TopKResult top_k(const Tensor& scores, int64_t k, const Tensor* row_lengths,
                 const TopKOptions& options) {
  ApiCall call(top_k_op());
  call.tensor("scores", scores).tensor("row_lengths", row_lengths).option("k", k);
  if (options.return_scores) call.option("return_scores", true);
  TensorMap outputs = call.run(options.implementation, options.config);
  TopKResult result{outputs.at("indices"), std::nullopt};
  if (options.return_scores) result.scores_bits = outputs.at("scores_bits");
  return result;
}

}  // namespace tokamax
