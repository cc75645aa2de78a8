// router_topk: high-level API and the dispatch order of its implementations.
#include "ops/router_topk/api.h"

#include "ops/framework/dispatch.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& router_topk_cpu_implementation();
const Implementation& router_topk_reference_implementation();

// Fastest first.
template <>
std::vector<const Implementation*> ProblemOp<RouterTopKProblem>::implementations() const {
  return {&router_topk_cpu_implementation(), &router_topk_reference_implementation()};
}

const RouterTopKOp& router_topk_op() {
  static const RouterTopKOp op;
  return op;
}

RouterTopKResult router_topk(const Tensor& scores, int64_t k, const RouterTopKOptions& options) {
  ApiCall call(router_topk_op());
  call.tensor("scores", scores).option("k", k);
  TensorMap outputs = call.run(options.implementation, options.config);
  return {outputs.at("weights"), outputs.at("indices")};
}

}  // namespace tokamax
