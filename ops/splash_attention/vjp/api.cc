// splash_attention_vjp: high-level API and the dispatch order of its implementations.
#include "ops/splash_attention/vjp/api.h"

#include <vector>

#include "ops/framework/dispatch.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& splash_attention_vjp_cpu_implementation();
const Implementation& splash_attention_vjp_reference_implementation();

// Fastest first.
template <>
std::vector<const Implementation*> ProblemOp<SplashAttentionVjpProblem>::implementations() const {
  return {&splash_attention_vjp_cpu_implementation(),
          &splash_attention_vjp_reference_implementation()};
}

const SplashAttentionVjpOp& splash_attention_vjp_op() {
  static const SplashAttentionVjpOp op;
  return op;
}

TensorMap splash_attention_vjp(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& dout, const SplashAttentionOptions& options) {
  ApiCall call(splash_attention_vjp_op());
  call.tensor("q", q).tensor("k", k).tensor("v", v).tensor("dout", dout);
  for (const auto& [name, tensor] : options.tensors) call.tensor(name, tensor);
  for (const auto& [name, value] : options.args.items()) call.option(name, value);
  return call.run(options.implementation, options.config);
}

}  // namespace tokamax
