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
std::vector<const Implementation*> DotProductAttentionVjpOp::implementations() const {
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
  nlohmann::json args = {{"q", q.spec().to_string()},
                         {"k", k.spec().to_string()},
                         {"v", v.spec().to_string()},
                         {"dout", dout.spec().to_string()},
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
  if (lse) args["lse"] = lse->spec().to_string();
  if (out) args["out"] = out->spec().to_string();
  const DotProductAttentionVjpOp& op = dot_product_attention_vjp_op();
  const BoundArgs bound = op.bind(args);
  TensorMap inputs = {{"q", q}, {"k", k}, {"v", v}, {"dout", dout}};
  if (options.bias) inputs.emplace("bias", *options.bias);
  if (options.mask) inputs.emplace("mask", *options.mask);
  if (lse) inputs.emplace("lse", *lse);
  if (out) inputs.emplace("out", *out);
  TensorMap outputs = op.allocate_outputs(bound);
  dispatch(op, bound, options.implementation, options.config, inputs, outputs);
  AttentionGradients grads{outputs.at("dq"), outputs.at("dk"), outputs.at("dv"), std::nullopt};
  if (options.bias) grads.dbias = outputs.at("dbias");
  return grads;
}

}  // namespace tokamax
