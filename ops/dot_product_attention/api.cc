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
std::vector<const Implementation*> DotProductAttentionOp::implementations() const {
  return {&dot_product_attention_cpu_implementation(),
          &dot_product_attention_reference_implementation(),
          &dot_product_attention_onednn_implementation()};
}

const DotProductAttentionOp& dot_product_attention_op() {
  static const DotProductAttentionOp op;
  return op;
}

Tensor dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                             const DotProductAttentionOptions& options) {
  nlohmann::json args = {{"q", q.spec().to_string()},
                         {"k", k.spec().to_string()},
                         {"v", v.spec().to_string()},
                         {"is_causal", options.is_causal}};
  if (options.logits_scale) args["logits_scale"] = *options.logits_scale;
  if (options.logits_soft_cap) args["logits_soft_cap"] = *options.logits_soft_cap;
  if (options.bias) args["bias"] = options.bias->spec().to_string();
  if (options.mask) args["mask"] = options.mask->spec().to_string();
  if (options.q_seq_lengths) args["q_seq_lengths"] = *options.q_seq_lengths;
  if (options.kv_seq_lengths) args["kv_seq_lengths"] = *options.kv_seq_lengths;
  if (options.local_window) {
    args["local_window"] = {options.local_window->first, options.local_window->second};
  }
  const DotProductAttentionOp& op = dot_product_attention_op();
  const BoundArgs bound = op.bind(args);
  TensorMap inputs;
  inputs.emplace("q", q);
  inputs.emplace("k", k);
  inputs.emplace("v", v);
  if (options.bias) inputs.emplace("bias", *options.bias);
  if (options.mask) inputs.emplace("mask", *options.mask);
  TensorMap outputs = op.allocate_outputs(bound);
  dispatch(op, bound, options.implementation, options.config, inputs, outputs);
  return outputs.at("out");
}

}  // namespace tokamax
