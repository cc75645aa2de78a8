// splash_attention: high-level API and the dispatch order of its implementations.
#include "ops/splash_attention/api.h"

#include <vector>

#include "ops/framework/dispatch.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& splash_attention_cpu_implementation();
const Implementation& splash_attention_reference_implementation();

// Fastest first.
template <>
std::vector<const Implementation*> ProblemOp<SplashAttentionProblem>::implementations() const {
  return {&splash_attention_cpu_implementation(), &splash_attention_reference_implementation()};
}

const SplashAttentionOp& splash_attention_op() {
  static const SplashAttentionOp op;
  return op;
}

TensorMap splash_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                           const SplashAttentionOptions& options) {
  ApiCall call(splash_attention_op());
  call.tensor("q", q).tensor("k", k).tensor("v", v);
  for (const auto& [name, tensor] : options.tensors) call.tensor(name, tensor);
  for (const auto& [name, value] : options.args.items()) call.option(name, value);
  return call.run(options.implementation, options.config);
}

}  // namespace tokamax
