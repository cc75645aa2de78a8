// dot_product_attention_vjp: binding (the forward's args, dout, the optional lse and out),
// inputs and outputs, counts.
//
// Dimensions: as base.h (*B, T, t, H, h, D, d).
#include "ops/dot_product_attention/vjp/base.h"

#include <string>

#include "ops/dot_product_attention/api.h"
#include "ops/framework/errors.h"
#include "ops/framework/vjp.h"

namespace tokamax {

AttentionVjpProblem AttentionVjpProblem::from(const BoundArgs& args) {
  AttentionVjpProblem p;
  p.fwd = AttentionProblem::from(args);
  p.has_lse = args.has("lse");
  p.has_out = args.has("out");
  return p;
}

TensorSpec attention_lse_spec(const AttentionProblem& p) {
  std::vector<int64_t> dims = p.batch;
  dims.insert(dims.end(), {p.H, p.T});
  return TensorSpec{DType::kF32, dims};
}

const Op* DotProductAttentionVjpOp::primal() const { return &dot_product_attention_op(); }

template <>
BoundArgs ProblemOp<AttentionVjpProblem>::bind_canonical(const nlohmann::json& args) const {
  // lse and out are the VJP's own inputs (the forward's residual and output, not forward
  // arguments): taken out before the forward binds the rest, checked against the bound shapes,
  // and kept in the canonical args only when given, so the cache key of a call without them has
  // no entry for them.
  nlohmann::json forward = args;
  nlohmann::json given[2];
  const char* const names[2] = {"lse", "out"};
  for (int n = 0; n < 2; ++n) {
    if (args.is_object() && args.contains(names[n])) {
      given[n] = args.at(names[n]);
      forward.erase(names[n]);
    }
  }
  BoundArgs bound = bind_vjp(dot_product_attention_op(), name(), forward, cotangents());
  const AttentionProblem p = AttentionProblem::from(bound);
  if (p.dropout_mask) {
    throw InvalidArgument(std::string(name()) + ": dropout is not implemented for the gradient",
                          "dropout_mask");
  }
  if (p.bf16_logits) {
    throw InvalidArgument(
        std::string(name()) + ": logits_dtype bf16 is not implemented for the gradient",
        "logits_dtype");
  }
  if (!p.normalize_output) {
    throw InvalidArgument(
        std::string(name()) + ": normalize_output false is not implemented for the gradient",
        "normalize_output");
  }
  for (int n = 0; n < 2; ++n) {
    if (given[n].is_null()) continue;
    const bool is_lse = n == 0;
    const TensorSpec want =
        is_lse ? attention_lse_spec(p) : dot_product_attention_op().outputs(bound)[0].spec;
    const char* what = is_lse ? " (the forward's per-row log-sum-exp, f32 [*B, H, T]), got "
                              : " (the forward's output, [*B, T, H, d] in q's dtype), got ";
    const std::string prefix = std::string(name()) + ": " + names[n] + " ";
    if (!given[n].is_string()) {
      throw InvalidArgument(
          prefix + "must be a tensor spec like " + want.to_string() + ", got " + given[n].dump(),
          names[n]);
    }
    TensorSpec spec;
    try {
      spec = parse_tensor_spec(given[n].get<std::string>());
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(prefix + e.what(), names[n]);
    }
    if (spec != want) {
      throw InvalidArgument(prefix + "must be " + want.to_string() + what + spec.to_string(),
                            names[n]);
    }
    bound.args[names[n]] = spec.to_string();
  }
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<AttentionVjpProblem>::inputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = dot_product_attention_op().inputs(args);
  decls.push_back({"dout", args.tensor("dout")});
  if (args.has("lse")) decls.push_back({"lse", args.tensor("lse")});
  if (args.has("out")) decls.push_back({"out", args.tensor("out")});
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<AttentionVjpProblem>::outputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = {
      {"dq", args.tensor("q")}, {"dk", args.tensor("k")}, {"dv", args.tensor("v")}};
  if (!args.option("bias").is_null()) decls.push_back({"dbias", args.tensor("bias")});
  return decls;
}

template <>
double ProblemOp<AttentionVjpProblem>::flops(const BoundArgs& args) const {
  // The standard count (FlashAttention-2's backward): S = q k^T again (2 T t D), dP = dout v^T
  // (2 T t d), dv = P^T dout (2 T t d), dq = dS k and dk = dS^T q (2 T t D each): 2.5 times the
  // forward's 2 T t (D + d) when D = d; halved under is_causal, the visible entries under a
  // local window or a causal band (as the forward counts), nothing else discounted. The
  // recomputation of out's row sums (or lse) that an implementation may add is not counted.
  const AttentionProblem p = AttentionProblem::from(args);
  if (p.has_local_window() || p.has_causal_band()) {
    return 2.0 * p.visible_entries() * p.H * (3.0 * p.D + 2.0 * p.d);
  }
  const double full = 2.0 * static_cast<double>(p.B) * p.H * p.T * p.t * (3.0 * p.D + 2.0 * p.d);
  return p.is_causal ? 0.5 * full : full;
}

template <>
double ProblemOp<AttentionVjpProblem>::bytes(const BoundArgs& args) const {
  double total = 0.0;
  for (const TensorDecl& decl : inputs(args)) total += static_cast<double>(decl.spec.size_bytes());
  for (const TensorDecl& decl : outputs(args)) total += static_cast<double>(decl.spec.size_bytes());
  return total;
}

}  // namespace tokamax
