// kimi_delta_attention_vjp: high-level API and the dispatch order of its implementations.
#include "ops/kimi_delta_attention/vjp/api.h"

#include <vector>

#include "ops/framework/dispatch.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& kimi_delta_attention_vjp_cpu_implementation();
const Implementation& kimi_delta_attention_vjp_reference_implementation();

// Fastest first.
template <>
std::vector<const Implementation*> ProblemOp<KdaVjpProblem>::implementations() const {
  return {&kimi_delta_attention_vjp_cpu_implementation(),
          &kimi_delta_attention_vjp_reference_implementation()};
}

const KdaVjpOp& kimi_delta_attention_vjp_op() {
  static const KdaVjpOp op;
  return op;
}

TensorMap kimi_delta_attention_vjp(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& gate, const Tensor& beta, const Tensor& dout,
                                   const KdaOptions& options) {
  ApiCall call(kimi_delta_attention_vjp_op());
  call.tensor("query", query).tensor("key", key).tensor("value", value);
  call.tensor("gate", gate).tensor("beta", beta).tensor("dout", dout);
  for (const auto& [name, tensor] : options.tensors) call.tensor(name, tensor);
  for (const auto& [name, value_] : options.args.items()) call.option(name, value_);
  return call.run(options.implementation, options.config);
}

}  // namespace tokamax
