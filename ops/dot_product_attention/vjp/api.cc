// dot_product_attention_vjp: high-level API and the dispatch order of its implementations.
#include "ops/dot_product_attention/vjp/api.h"

#include <vector>

#include "ops/framework/dispatch.h"

namespace tokamax {

// Defined in the vjp_* implementation files of this folder.
const Implementation& dot_product_attention_vjp_cpu_implementation();
const Implementation& dot_product_attention_vjp_reference_implementation();
const Implementation& dot_product_attention_vjp_onednn_implementation();

// Fastest first; the vendor composite after the reference, so "auto" never picks it.
template <>
std::vector<const Implementation*> ProblemOp<AttentionVjpProblem>::implementations() const {
  return {&dot_product_attention_vjp_cpu_implementation(),
          &dot_product_attention_vjp_reference_implementation(),
          &dot_product_attention_vjp_onednn_implementation()};
}

const DotProductAttentionVjpOp& dot_product_attention_vjp_op() {
  static const DotProductAttentionVjpOp op;
  return op;
}

AttentionGradients dot_product_attention_vjp(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& dout,
                                             const DotProductAttentionOptions& options,
                                             const Tensor* lse, const Tensor* out) {
  ApiCall call(dot_product_attention_vjp_op());
  add_attention_arguments(call, q, k, v, options);
  call.tensor("dout", dout).tensor("lse", lse).tensor("out", out);
  TensorMap outputs = call.run(options.implementation, options.config);
  AttentionGradients grads{outputs.at("dq"), outputs.at("dk"), outputs.at("dv"), std::nullopt};
  if (options.bias) grads.dbias = outputs.at("dbias");
  return grads;
}

}  // namespace tokamax
