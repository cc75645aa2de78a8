// dot_product_attention: high-level API and the dispatch order of its implementations.
#include "ops/dot_product_attention/api.h"

#include "ops/framework/dispatch.h"
#include "ops/framework/errors.h"

namespace tokamax {

// Defined in the implementation files of this folder.
const Implementation& dot_product_attention_cpu_implementation();
const Implementation& dot_product_attention_reference_implementation();
const Implementation& dot_product_attention_onednn_implementation();

// Fastest first; the vendor composite comes after the reference so "auto" never picks it.
template <>
std::vector<const Implementation*> ProblemOp<AttentionProblem>::implementations() const {
  return {&dot_product_attention_cpu_implementation(),
          &dot_product_attention_reference_implementation(),
          &dot_product_attention_onednn_implementation()};
}

const DotProductAttentionOp& dot_product_attention_op() {
  static const DotProductAttentionOp op;
  return op;
}

void add_attention_arguments(ApiCall& call, const Tensor& q, const Tensor& k, const Tensor& v,
                             const DotProductAttentionOptions& options) {
  call.tensor("q", q).tensor("k", k).tensor("v", v);
  call.tensor("bias", options.bias ? &*options.bias : nullptr);
  call.tensor("mask", options.mask ? &*options.mask : nullptr);
  for (const auto& [name, tensor] : options.ranges) call.tensor(name, tensor);
  call.option("is_causal", options.is_causal)
      .option("logits_scale", options.logits_scale)
      .option("logits_soft_cap", options.logits_soft_cap)
      .option("q_seq_lengths", options.q_seq_lengths)
      .option("kv_seq_lengths", options.kv_seq_lengths);
  if (options.local_window) {
    call.option("local_window", {options.local_window->first, options.local_window->second});
  }
}

Tensor dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                             const DotProductAttentionOptions& options) {
  ApiCall call(dot_product_attention_op());
  add_attention_arguments(call, q, k, v, options);
  return call.run(options.implementation, options.config).at("out");
}

}  // namespace tokamax
