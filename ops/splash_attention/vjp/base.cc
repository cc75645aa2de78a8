// splash_attention_vjp: binding (the forward's args, dout, the optional logsumexp and out),
// inputs and outputs, counts.
//
// Dimensions: as base.h.
#include "ops/splash_attention/vjp/base.h"

#include <cmath>
#include <string>

#include "ops/framework/errors.h"
#include "ops/framework/vjp.h"
#include "ops/splash_attention/api.h"
#include "ops/splash_attention/mask.h"

namespace tokamax {
namespace {

TensorSpec lse_spec(const SplashAttentionProblem& p) {
  return TensorSpec{DType::kF32, {p.Hq, p.T}};
}

}  // namespace

SplashAttentionVjpProblem SplashAttentionVjpProblem::from(const BoundArgs& args) {
  SplashAttentionVjpProblem p;
  p.fwd = SplashAttentionProblem::from(args);
  p.has_lse = args.has("logsumexp");
  p.has_out = args.has("out");
  return p;
}

const Op* SplashAttentionVjpOp::primal() const { return &splash_attention_op(); }

double splash_masked_weight(float lse) {
  const auto mask_value = static_cast<float>(kSplashDefaultMaskValue);
  return std::exp(static_cast<double>(mask_value - lse));
}

template <>
BoundArgs ProblemOp<SplashAttentionVjpProblem>::bind_canonical(const nlohmann::json& args) const {
  // logsumexp and out are the VJP's own inputs (upstream's residual and the forward's output):
  // taken out before the forward binds the rest, checked against the bound shapes, kept only
  // when given.
  const std::string prefix = std::string(name()) + ": ";
  nlohmann::json forward = args;
  nlohmann::json given[2];
  const char* const names[2] = {"logsumexp", "out"};
  for (int n = 0; n < 2; ++n) {
    if (args.is_object() && args.contains(names[n])) {
      given[n] = args.at(names[n]);
      forward.erase(names[n]);
    }
  }
  if (args.is_object() && args.contains("return_residuals") &&
      args.at("return_residuals") == true) {
    throw InvalidArgument(
        prefix + "return_residuals is not supported by the gradient (as upstream)",
        "return_residuals");
  }
  BoundArgs bound = bind_vjp(splash_attention_op(), name(), forward, {"dout"});
  const SplashAttentionProblem p = SplashAttentionProblem::from(bound);
  for (int n = 0; n < 2; ++n) {
    if (given[n].is_null()) continue;
    const bool is_lse = n == 0;
    const TensorSpec want = is_lse ? lse_spec(p) : splash_attention_op().outputs(bound)[0].spec;
    const char* what = is_lse ? " (the forward's residual logsumexp, f32 [Hq, T]), got "
                              : " (the forward's output, [Hq, T, d] in q's dtype), got ";
    const std::string field = prefix + names[n] + " ";
    if (!given[n].is_string()) {
      throw InvalidArgument(
          field + "must be a tensor spec like " + want.to_string() + ", got " + given[n].dump(),
          names[n]);
    }
    TensorSpec spec;
    try {
      spec = parse_tensor_spec(given[n].get<std::string>());
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(field + e.what(), names[n]);
    }
    if (spec != want) {
      throw InvalidArgument(field + "must be " + want.to_string() + what + spec.to_string(),
                            names[n]);
    }
    bound.args[names[n]] = spec.to_string();
  }
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<SplashAttentionVjpProblem>::inputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = splash_attention_op().inputs(args);
  decls.push_back({"dout", args.tensor("dout")});
  for (const char* name : {"logsumexp", "out"}) {
    if (args.has(name)) decls.push_back({name, args.tensor(name)});
  }
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<SplashAttentionVjpProblem>::outputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = {
      {"dq", args.tensor("q")}, {"dk", args.tensor("k")}, {"dv", args.tensor("v")}};
  if (args.has("sinks")) decls.push_back({"dsinks", args.tensor("sinks")});
  return decls;
}

template <>
double ProblemOp<SplashAttentionVjpProblem>::flops(const BoundArgs& args) const {
  // FlashAttention-2's backward count over the mask's visible entries: S again (2 D), dP (2 d),
  // dv (2 d), dq and dk (2 D each) per entry. Segment ids (input data) and the rows that see no
  // key are not counted.
  const SplashAttentionProblem p = SplashAttentionProblem::from(args);
  const SplashMask mask(p.mask, p.T, p.t);
  double visible = 0.0;
  for (int64_t r = 0; r < p.T; ++r) visible += static_cast<double>(mask.count(r));
  return 2.0 * visible * p.Hq * (3.0 * p.D + 2.0 * p.d);
}

template <>
double ProblemOp<SplashAttentionVjpProblem>::bytes(const BoundArgs& args) const {
  double total = 0.0;
  for (const TensorDecl& decl : inputs(args)) total += static_cast<double>(decl.spec.size_bytes());
  for (const TensorDecl& decl : outputs(args)) total += static_cast<double>(decl.spec.size_bytes());
  return total;
}

}  // namespace tokamax
