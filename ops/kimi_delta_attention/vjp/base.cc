// kimi_delta_attention_vjp: binding (the forward's args, dout and the optional dfinal_state),
// inputs and outputs, counts.
//
// Dimensions: as base.h.
#include "ops/kimi_delta_attention/vjp/base.h"

#include <string>

#include "ops/framework/errors.h"
#include "ops/framework/vjp.h"
#include "ops/kimi_delta_attention/api.h"

namespace tokamax {

KdaVjpProblem KdaVjpProblem::from(const BoundArgs& args) {
  KdaVjpProblem p;
  p.fwd = KdaProblem::from(args);
  p.has_dfinal_state = args.has("dfinal_state");
  return p;
}

const Op* KdaVjpOp::primal() const { return &kimi_delta_attention_op(); }

template <>
BoundArgs ProblemOp<KdaVjpProblem>::bind_canonical(const nlohmann::json& args) const {
  // dfinal_state, the cotangent of the optional final_state output, is taken out before the
  // forward binds the rest and checked against final_state's spec; absent, it is zeros.
  const std::string prefix = std::string(name()) + ": ";
  nlohmann::json forward = args;
  nlohmann::json given;
  if (args.is_object() && args.contains("dfinal_state")) {
    given = args.at("dfinal_state");
    forward.erase("dfinal_state");
  }
  if (args.is_object() && args.contains("return_residuals") &&
      args.at("return_residuals") == true) {
    throw InvalidArgument(prefix + "return_residuals is not supported by the gradient",
                          "return_residuals");
  }
  BoundArgs bound = bind_vjp(kimi_delta_attention_op(), name(), forward, cotangents());
  if (given.is_null()) return bound;
  const std::vector<TensorDecl> outs = kimi_delta_attention_op().outputs(bound);
  if (outs.size() < 2) {
    throw InvalidArgument(prefix + "dfinal_state needs output_final_state: true (it is the " +
                              "cotangent of the final_state output)",
                          "dfinal_state");
  }
  const TensorSpec want = outs[1].spec;
  if (!given.is_string()) {
    throw InvalidArgument(prefix + "dfinal_state must be a tensor spec like " + want.to_string() +
                              ", got " + given.dump(),
                          "dfinal_state");
  }
  TensorSpec spec;
  try {
    spec = parse_tensor_spec(given.get<std::string>());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(prefix + "dfinal_state " + e.what(), "dfinal_state");
  }
  if (spec != want) {
    throw InvalidArgument(prefix + "dfinal_state must be " + want.to_string() +
                              " (the cotangent of final_state: f32 [B, N, H, K, V]), got " +
                              spec.to_string(),
                          "dfinal_state");
  }
  bound.args["dfinal_state"] = spec.to_string();
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<KdaVjpProblem>::inputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = kimi_delta_attention_op().inputs(args);
  decls.push_back({"dout", args.tensor("dout")});
  if (args.has("dfinal_state")) decls.push_back({"dfinal_state", args.tensor("dfinal_state")});
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<KdaVjpProblem>::outputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls;
  for (const char* name :
       {"query", "key", "value", "gate", "beta", "a_log", "delta_time_bias", "initial_state"}) {
    if (args.has(name)) decls.push_back({vjp_name(name), args.tensor(name)});
  }
  return decls;
}

template <>
double ProblemOp<KdaVjpProblem>::flops(const BoundArgs& args) const {
  // Per token and head: the forward recomputed (7 K V, as the forward counts), then dS += q^
  // dout^T, S_t dout, dS^T k^ and dS r (2 K V each, S_t formed: 2 K V more), dS' and S' dr and
  // dg (2 K V each) and the decay of dS (K V).
  const KdaProblem p = KdaVjpProblem::from(args).fwd;
  return 24.0 * static_cast<double>(p.H) * p.B * p.T * p.K * p.V;
}

template <>
double ProblemOp<KdaVjpProblem>::bytes(const BoundArgs& args) const {
  double total = 0.0;
  for (const TensorDecl& decl : inputs(args)) total += static_cast<double>(decl.spec.size_bytes());
  for (const TensorDecl& decl : outputs(args)) total += static_cast<double>(decl.spec.size_bytes());
  return total;
}

}  // namespace tokamax
