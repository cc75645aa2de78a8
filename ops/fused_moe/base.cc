// fused_moe: binding, validation, tensors and counts.
#include "ops/fused_moe/base.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

constexpr const char* kPrefix = "fused_moe: ";
constexpr MoeActivation kActivations[] = {MoeActivation::kSilu, MoeActivation::kSwigluOai,
                                          MoeActivation::kSiluClamped};

std::string dims(std::initializer_list<int64_t> extents) {
  std::string text = "[";
  for (int64_t extent : extents) text += (text.size() > 1 ? "," : "") + std::to_string(extent);
  return text + "]";
}

bool present(const json& args, const char* name) {
  return args.contains(name) && !args.at(name).is_null();
}

// An optional bias of upstream's shape [E, 1, cols] in a float dtype.
TensorSpec read_bias(const json& args, const char* name, int64_t E, int64_t cols,
                     const char* cols_name) {
  const TensorSpec bias = read_tensor_arg(
      kPrefix, args, name, {.shape = "[E, 1, cols]", .example = "f32[8,1,512]", .rank = 3});
  if (bias.dims[0] != E || bias.dims[1] != 1 || bias.dims[2] != cols) {
    throw InvalidArgument(std::string(kPrefix) + name + " must be [E, 1, " + cols_name +
                              "] = " + dims({E, 1, cols}) + ", got " + bias.to_string(),
                          name);
  }
  return bias;
}

// A quantized expert weight's scale: float [E, cols], [E, blocks, cols] (blocks dividing the
// contraction K) or upstream's [E, 1, 1, cols].
TensorSpec read_scale(const json& args, const char* name, int64_t E, int64_t K, int64_t cols,
                      const char* cols_name) {
  const TensorSpec scale = read_tensor_arg(
      kPrefix, args, name, {.shape = "[E, cols]", .example = "f32[8,512]", .min_rank = 2});
  const auto& d = scale.dims;
  const bool ok = d.size() >= 2 && d.size() <= 4 && d.front() == E && d.back() == cols &&
                  (d.size() != 3 || (d[1] >= 1 && K % d[1] == 0)) &&
                  (d.size() != 4 || (d[1] == 1 && d[2] == 1));
  if (!ok) {
    throw InvalidArgument(std::string(kPrefix) + name + " must be float [E, " + cols_name +
                              "] = " + dims({E, cols}) + ", [E, blocks, " + cols_name +
                              "] with blocks dividing " + std::to_string(K) + ", or [E, 1, 1, " +
                              cols_name + "], got " + scale.to_string(),
                          name);
  }
  return scale;
}

int64_t scale_blocks(const TensorSpec& scale) { return scale.rank() == 3 ? scale.dims[1] : 1; }

}  // namespace

std::string_view moe_activation_name(MoeActivation act) {
  switch (act) {
    case MoeActivation::kSilu:
      return "silu";
    case MoeActivation::kSwigluOai:
      return "swigluoai";
    case MoeActivation::kSiluClamped:
      return "silu_and_mul_with_clamp";
  }
  return "silu";
}

MoeActivation parse_moe_activation(std::string_view name) {
  std::string known;
  for (MoeActivation act : kActivations) {
    if (moe_activation_name(act) == name) return act;
    known += (known.empty() ? "" : ", ") + std::string(moe_activation_name(act));
  }
  throw InvalidArgument(
      std::string(kPrefix) + "unknown act_fn '" + std::string(name) + "' (known: " + known + ")",
      "act_fn");
}

FusedMoeProblem FusedMoeProblem::from(const BoundArgs& args) {
  FusedMoeProblem p;
  const TensorSpec x = args.tensor("x"), w1 = args.tensor("w1");
  p.T = x.dims[0];
  p.H = x.dims[1];
  p.E = w1.dims[0];
  p.I = w1.dims[2] / 2;
  p.x_dtype = x.dtype;
  p.w_dtype = w1.dtype;
  p.gating_dtype = args.tensor("gating").dtype;
  p.k = args.option("topk").get<int64_t>();
  p.renormalize = args.option("renormalize").get<bool>();
  p.act = parse_moe_activation(args.option("act_fn").get<std::string>());
  p.has_w1_bias = args.has("w1_bias");
  p.has_w2_bias = args.has("w2_bias");
  if (p.quantized()) {
    p.w1_blocks = scale_blocks(args.tensor("w1_scale"));
    p.w2_blocks = scale_blocks(args.tensor("w2_scale"));
  }
  return p;
}

template <>
BoundArgs ProblemOp<FusedMoeProblem>::bind_canonical(const json& args) const {
  check_arg_names(kPrefix, args,
                  {"x", "w1", "w2", "gating", "w1_scale", "w2_scale", "w1_bias", "w2_bias", "topk",
                   "renormalize", "act_fn"});
  const TensorSpec x = read_tensor_arg(kPrefix, args, "x",
                                       {.shape = "[T, H]", .example = "bf16[64,2048]", .rank = 2});
  const TensorArgRule weight_rule{.rank = 3,
                                  .quantized_ok = true,
                                  .quantized_note =
                                      " (or quantized i8 / f8e4m3 with w1_scale and "
                                      "w2_scale)"};
  TensorArgRule w1_rule = weight_rule, w2_rule = weight_rule;
  w1_rule.shape = "[E, H, 2 I]";
  w1_rule.example = "bf16[64,2048,1024]";
  w2_rule.shape = "[E, I, H]";
  w2_rule.example = "bf16[64,512,2048]";
  const TensorSpec w1 = read_tensor_arg(kPrefix, args, "w1", w1_rule);
  const TensorSpec w2 = read_tensor_arg(kPrefix, args, "w2", w2_rule);
  const TensorSpec gating = read_tensor_arg(
      kPrefix, args, "gating", {.shape = "[T, E]", .example = "f32[64,64]", .rank = 2});
  for (const TensorSpec* spec : {&x, &gating}) {
    if (!is_kernel_float(spec->dtype)) {
      const char* name = spec == &x ? "x" : "gating";
      throw InvalidArgument(
          std::string(kPrefix) + name + " must be f32, bf16 or f16, got " + spec->to_string(),
          name);
    }
  }
  const int64_t T = x.dims[0], H = x.dims[1], E = w1.dims[0];
  if (w1.dims[1] != H || w1.dims[2] % 2 != 0 || w1.dims[2] == 0) {
    throw InvalidArgument(std::string(kPrefix) +
                              "w1 must be [E, H, 2 I] with H = " + std::to_string(H) +
                              " (x's columns) and 2 I even and > 0, got " + w1.to_string(),
                          "w1");
  }
  if (E < 1) throw InvalidArgument(std::string(kPrefix) + "w1 must hold at least one expert", "w1");
  const int64_t I = w1.dims[2] / 2;
  if (w2.dims[0] != E || w2.dims[1] != I || w2.dims[2] != H) {
    throw InvalidArgument(std::string(kPrefix) + "w2 must be [E, I, H] = " + dims({E, I, H}) +
                              " (from w1 " + w1.to_string() + " and x " + x.to_string() +
                              "), got " + w2.to_string(),
                          "w2");
  }
  const bool quantized = is_quantized(w1.dtype);
  if (quantized ? w2.dtype != w1.dtype : (w1.dtype != x.dtype || w2.dtype != x.dtype)) {
    const char* name = !quantized && w1.dtype != x.dtype ? "w1" : "w2";
    throw InvalidArgument(
        std::string(kPrefix) + name + " must have " +
            (quantized ? "w1's quantized dtype " + std::string(dtype_name(w1.dtype))
                       : "x's dtype " + std::string(dtype_name(x.dtype))) +
            ", got " + (std::string(name) == "w1" ? w1 : w2).to_string(),
        name);
  }
  if (!quantized && is_quantized(w2.dtype)) {
    throw InvalidArgument(std::string(kPrefix) + "w2 " + w2.to_string() + " is quantized but w1 " +
                              w1.to_string() + " is not",
                          "w2");
  }
  if (gating.dims[0] != T || gating.dims[1] != E) {
    throw InvalidArgument(std::string(kPrefix) + "gating must be [T, E] = " + dims({T, E}) +
                              " (x's rows, w1's experts), got " + gating.to_string(),
                          "gating");
  }
  if (T * 64 > std::numeric_limits<int32_t>::max()) {
    throw InvalidArgument(std::string(kPrefix) + "x " + x.to_string() +
                              " has more tokens than the routes' i32 indices can name",
                          "x");
  }
  const int64_t k = args.contains("topk") && !args.at("topk").is_null()
                        ? read_int_arg(kPrefix, args, "topk", 1, std::min<int64_t>(E, 64),
                                       "[1, min(E = " + std::to_string(E) + ", 64)]")
                        : 2;
  if (k > E) {
    throw InvalidArgument(std::string(kPrefix) + "topk defaults to 2 but w1 has only " +
                              std::to_string(E) + " expert; give topk = 1",
                          "topk");
  }
  const bool renormalize = read_bool_arg(kPrefix, args, "renormalize", true);
  std::string act_fn = "silu";
  if (present(args, "act_fn")) {
    if (!args.at("act_fn").is_string()) {
      throw InvalidArgument(std::string(kPrefix) + "act_fn must be a name (a string), got " +
                                args.at("act_fn").dump(),
                            "act_fn");
    }
    act_fn = args.at("act_fn").get<std::string>();
  }
  parse_moe_activation(act_fn);

  for (const char* scale : {"w1_scale", "w2_scale"}) {
    if (present(args, scale) != quantized) {
      throw InvalidArgument(
          quantized ? std::string(kPrefix) + "w1 " + w1.to_string() +
                          " is quantized: it needs w1_scale f32[E, 2 I] (or [E, blocks, 2 I], "
                          "[E, 1, 1, 2 I]) and w2_scale f32[E, H] (or [E, blocks, H])"
                    : std::string(kPrefix) + scale + " is the scale of quantized experts, but w1 " +
                          w1.to_string() + " is not quantized (i8 or f8e4m3)",
          scale);
    }
  }

  BoundArgs bound;
  bound.op = std::string(FusedMoeProblem::kOp);
  bound.args = {{"x", x.to_string()},
                {"w1", w1.to_string()},
                {"w2", w2.to_string()},
                {"gating", gating.to_string()},
                {"topk", k},
                {"renormalize", renormalize},
                {"act_fn", act_fn}};
  if (present(args, "w1_bias"))
    bound.args["w1_bias"] = read_bias(args, "w1_bias", E, 2 * I, "2 I").to_string();
  if (present(args, "w2_bias"))
    bound.args["w2_bias"] = read_bias(args, "w2_bias", E, H, "H").to_string();
  if (quantized) {
    bound.args["w1_scale"] = read_scale(args, "w1_scale", E, H, 2 * I, "2 I").to_string();
    bound.args["w2_scale"] = read_scale(args, "w2_scale", E, I, H, "H").to_string();
  }
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<FusedMoeProblem>::inputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = {{"x", args.tensor("x")},
                                   {"w1", args.tensor("w1")},
                                   {"w2", args.tensor("w2")},
                                   {"gating", args.tensor("gating")}};
  for (const char* optional : {"w1_bias", "w2_bias", "w1_scale", "w2_scale"}) {
    if (args.has(optional)) decls.push_back({optional, args.tensor(optional)});
  }
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<FusedMoeProblem>::outputs(const BoundArgs& args) const {
  const FusedMoeProblem p = FusedMoeProblem::from(args);
  return {{"out", TensorSpec{p.x_dtype, {p.T, p.H}}}};
}

template <>
double ProblemOp<FusedMoeProblem>::flops(const BoundArgs& args) const {
  // Per route: x w1 (H x 2 I) and act w2 (I x H) multiply-adds; routing and the activation are
  // lower order.
  const FusedMoeProblem p = FusedMoeProblem::from(args);
  return 2.0 * static_cast<double>(p.routes()) * 3.0 * static_cast<double>(p.H) *
         static_cast<double>(p.I);
}

template <>
double ProblemOp<FusedMoeProblem>::bytes(const BoundArgs& args) const {
  // x, gating and the output once; the weights (and biases) of the experts the routes use, each
  // read once: with routes spread over the experts, E (1 - (1 - k / E)^T) of them are expected.
  const FusedMoeProblem p = FusedMoeProblem::from(args);
  const double E = static_cast<double>(p.E);
  const double used =
      E * (1.0 - std::pow(1.0 - static_cast<double>(p.k) / E, static_cast<double>(p.T)));
  const double H = static_cast<double>(p.H), I = static_cast<double>(p.I);
  const double per_expert =
      3.0 * H * I * dtype_size(p.w_dtype) +
      (p.has_w1_bias ? 2.0 * I * dtype_size(args.tensor("w1_bias").dtype) : 0.0) +
      (p.has_w2_bias ? H * dtype_size(args.tensor("w2_bias").dtype) : 0.0);
  const double T = static_cast<double>(p.T);
  const double scales =
      p.quantized() ? 4.0 * (static_cast<double>(p.w1_blocks) * 2.0 * I + p.w2_blocks * H) : 0.0;
  return 2.0 * T * H * dtype_size(p.x_dtype) + used * scales + T * E * dtype_size(p.gating_dtype) +
         used * per_expert;
}

}  // namespace tokamax
