// kimi_delta_attention: high-level API and the dispatch order of its implementations.
#include "ops/kimi_delta_attention/api.h"

#include <vector>

#include "ops/framework/dispatch.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& kimi_delta_attention_cpu_implementation();
const Implementation& kimi_delta_attention_reference_implementation();

// Fastest first.
template <>
std::vector<const Implementation*> ProblemOp<KdaProblem>::implementations() const {
  return {&kimi_delta_attention_cpu_implementation(),
          &kimi_delta_attention_reference_implementation()};
}

const KdaOp& kimi_delta_attention_op() {
  static const KdaOp op;
  return op;
}

TensorMap kimi_delta_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                               const Tensor& gate, const Tensor& beta, const KdaOptions& options) {
  ApiCall call(kimi_delta_attention_op());
  call.tensor("query", query).tensor("key", key).tensor("value", value);
  call.tensor("gate", gate).tensor("beta", beta);
  for (const auto& [name, tensor] : options.tensors) call.tensor(name, tensor);
  for (const auto& [name, value_] : options.args.items()) call.option(name, value_);
  return call.run(options.implementation, options.config);
}

}  // namespace tokamax
