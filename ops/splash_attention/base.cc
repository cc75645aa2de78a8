// splash_attention: canonical binding, validation, tensors and counts.
//
// Dimensions: as base.h.
#include "ops/splash_attention/base.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "ops/framework/errors.h"
#include "ops/splash_attention/mask.h"

namespace tokamax {
namespace {

using nlohmann::json;

constexpr const char* kPrefix = "splash_attention: ";

[[noreturn]] void fail(const std::string& message, const char* field) {
  throw InvalidArgument(std::string(kPrefix) + message, field);
}

bool present(const json& args, const char* name) {
  return args.contains(name) && !args.at(name).is_null();
}

}  // namespace

SplashAttentionProblem SplashAttentionProblem::from(const BoundArgs& args) {
  SplashAttentionProblem p;
  const TensorSpec q = args.tensor("q"), k = args.tensor("k"), v = args.tensor("v");
  p.Hq = q.dims[0];
  p.T = q.dims[1];
  p.D = q.dims[2];
  p.dtype = q.dtype;
  p.is_mqa = args.option("is_mqa").get<bool>();
  p.Hkv = k.rank() == 3 ? k.dims[0] : 1;
  p.t = k.dims[k.rank() - 2];
  p.d = v.dims[v.rank() - 1];
  p.mask = args.option("mask");
  p.has_segments = args.has("q_segment_ids");
  p.has_sinks = args.has("sinks");
  p.soft_cap = args.option("attn_logits_soft_cap").is_null()
                   ? 0.0
                   : args.option("attn_logits_soft_cap").get<double>();
  p.mask_value = args.option("mask_value").get<double>();
  p.return_residuals = args.option("return_residuals").get<bool>();
  return p;
}

SplashKeylessRow splash_keyless_row(const SplashAttentionProblem& p, double sink) {
  // m = max(mask_value, sink), l = t exp(mask_value - m) + exp(sink - m).
  SplashKeylessRow row;
  row.max = std::max(p.mask_value, sink);
  const double keys = static_cast<double>(p.t) * std::exp(p.mask_value - row.max);
  const double l = keys + std::exp(sink - row.max);
  row.lse = row.max + std::log(l);
  row.weight = keys / l;
  return row;
}

template <>
BoundArgs ProblemOp<SplashAttentionProblem>::bind_canonical(const json& raw) const {
  json args = raw;
  // Upstream's SegmentIds(q, kv) object: its two arrays.
  if (present(args, "segment_ids")) {
    const json& ids = args.at("segment_ids");
    if (!ids.is_object() || !ids.contains("q") || !ids.contains("kv") || ids.size() != 2) {
      fail("segment_ids must be {q: \"i32[T]\", kv: \"i32[t]\"}, got " + ids.dump(), "segment_ids");
    }
    if (present(args, "q_segment_ids") || present(args, "kv_segment_ids")) {
      fail("give segment_ids or q_segment_ids / kv_segment_ids, not both", "segment_ids");
    }
    args["q_segment_ids"] = ids.at("q");
    args["kv_segment_ids"] = ids.at("kv");
  }
  args.erase("segment_ids");
  check_arg_names(kPrefix, args,
                  {"q", "k", "v", "mask", "q_segment_ids", "kv_segment_ids", "sinks", "is_mqa",
                   "mask_value", "attn_logits_soft_cap", "dropout_rate", "return_residuals"});
  const TensorSpec q = read_tensor_arg(
      kPrefix, args, "q", {.shape = "[Hq, T, D]", .example = "bf16[16,4096,128]", .rank = 3});
  const bool is_mqa = read_bool_arg(kPrefix, args, "is_mqa", false);
  const TensorArgRule kv_rule{.shape = is_mqa ? "[t, D] (or [1, t, D])" : "[Hkv, t, D]",
                              .example = is_mqa ? "bf16[4096,128]" : "bf16[8,4096,128]",
                              .min_rank = 2};
  const TensorSpec k = read_tensor_arg(kPrefix, args, "k", kv_rule);
  const TensorSpec v = read_tensor_arg(kPrefix, args, "v", kv_rule);
  const int64_t Hq = q.dims[0], T = q.dims[1], D = q.dims[2];
  if (q.dtype == DType::kF64 || is_quantized(q.dtype)) {
    fail("q must be f32, bf16 or f16, got " + q.to_string(), "q");
  }
  const int want_rank = is_mqa ? (k.rank() == 3 ? 3 : 2) : 3;
  for (const auto& [spec, name] : {std::pair{k, "k"}, std::pair{v, "v"}}) {
    if (spec.rank() != want_rank || spec.dtype != q.dtype ||
        (is_mqa && spec.rank() == 3 && spec.dims[0] != 1)) {
      fail(std::string(name) + " must be " +
               (is_mqa ? "[t, D] or [1, t, D] (is_mqa)" : "[Hkv, t, D] (3-D; is_mqa for 2-D)") +
               " in q's dtype " + std::string(dtype_name(q.dtype)) + ", got " + spec.to_string(),
           name);
    }
  }
  const int64_t Hkv = k.rank() == 3 ? k.dims[0] : 1, t = k.dims[k.rank() - 2];
  if (k.dims[k.rank() - 1] != D) {
    fail("k's head dimension must be q's D = " + std::to_string(D) + ", got " + k.to_string(), "k");
  }
  if (t < 1) fail("k must hold at least one key, got " + k.to_string(), "k");
  if (Hkv < 1 || Hq % Hkv != 0) {
    fail("num_q_heads (" + std::to_string(Hq) + ") must be divisible by num_kv_heads (" +
             std::to_string(Hkv) + ")",
         "k");
  }
  if (v.dims[v.rank() - 2] != t || (v.rank() == 3 && v.dims[0] != Hkv)) {
    fail("v must be [" + std::string(v.rank() == 3 ? std::to_string(Hkv) + ", " : "") +
             std::to_string(t) + ", d] (k's heads and keys), got " + v.to_string(),
         "v");
  }
  json out = {{"q", q.to_string()}, {"k", k.to_string()}, {"v", v.to_string()}};
  out["mask"] =
      canonical_splash_mask(args.contains("mask") ? args.at("mask") : json(), T, t, "mask");
  if (present(args, "q_segment_ids") != present(args, "kv_segment_ids")) {
    fail("segment ids need both q_segment_ids [T] and kv_segment_ids [t]",
         present(args, "q_segment_ids") ? "kv_segment_ids" : "q_segment_ids");
  }
  if (present(args, "q_segment_ids")) {
    for (const auto& [name, len] :
         {std::pair{"q_segment_ids", T}, std::pair{"kv_segment_ids", t}}) {
      const TensorSpec ids = read_tensor_arg(
          kPrefix, args, name,
          {.shape = "[len]", .example = "i32[4096]", .rank = 1, .float_only = false});
      if (ids.dtype != DType::kI32 || ids.dims[0] != len) {
        fail(
            std::string(name) + " must be i32[" + std::to_string(len) + "], got " + ids.to_string(),
            name);
      }
      out[name] = ids.to_string();
    }
  }
  if (present(args, "sinks")) {
    const TensorSpec sinks =
        read_tensor_arg(kPrefix, args, "sinks", {.shape = "[Hq]", .example = "f32[16]", .rank = 1});
    if (sinks.dims[0] != Hq || sinks.dtype == DType::kF64 || is_quantized(sinks.dtype)) {
      fail("sinks must be [Hq = " + std::to_string(Hq) + "] f32, bf16 or f16, got " +
               sinks.to_string(),
           "sinks");
    }
    out["sinks"] = sinks.to_string();
  }
  out["is_mqa"] = is_mqa;
  double mask_value = kSplashDefaultMaskValue;
  if (present(args, "mask_value")) {
    const json& value = args.at("mask_value");
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() > -1e4) {
      fail(
          "mask_value must be a finite number <= -1e4 (a masked key's weight exp(mask_value - "
          "max) is taken as 0 on rows that see a key), got " +
              value.dump(),
          "mask_value");
    }
    mask_value = value.get<double>();
  }
  out["mask_value"] = mask_value;
  out["attn_logits_soft_cap"] = nullptr;
  if (present(args, "attn_logits_soft_cap")) {
    const json& cap = args.at("attn_logits_soft_cap");
    if (!cap.is_number() || !std::isfinite(cap.get<double>()) || cap.get<double>() <= 0.0) {
      fail("attn_logits_soft_cap must be a positive number, got " + cap.dump(),
           "attn_logits_soft_cap");
    }
    out["attn_logits_soft_cap"] = cap.get<double>();
  }
  if (present(args, "dropout_rate") &&
      !(args.at("dropout_rate").is_number() && args.at("dropout_rate").get<double>() == 0.0)) {
    fail(
        "dropout_rate: upstream draws splash's dropout from a JAX prng_key, which has no "
        "counterpart here; only 0 is accepted",
        "dropout_rate");
  }
  out["return_residuals"] = read_bool_arg(kPrefix, args, "return_residuals", false);
  BoundArgs bound;
  bound.op = std::string(SplashAttentionProblem::kOp);
  bound.args = std::move(out);
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<SplashAttentionProblem>::inputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls = {
      {"q", args.tensor("q")}, {"k", args.tensor("k")}, {"v", args.tensor("v")}};
  for (const char* name : {"q_segment_ids", "kv_segment_ids", "sinks"}) {
    if (args.has(name)) decls.push_back({name, args.tensor(name)});
  }
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<SplashAttentionProblem>::outputs(const BoundArgs& args) const {
  const SplashAttentionProblem p = SplashAttentionProblem::from(args);
  std::vector<TensorDecl> decls = {{"out", TensorSpec{p.dtype, {p.Hq, p.T, p.d}}}};
  if (p.return_residuals) {
    decls.push_back({"max_logits", TensorSpec{DType::kF32, {p.Hq, p.T}}});
    decls.push_back({"logsumexp", TensorSpec{DType::kF32, {p.Hq, p.T}}});
  }
  return decls;
}

template <>
double ProblemOp<SplashAttentionProblem>::flops(const BoundArgs& args) const {
  // The mask's visible entries (segment ids, input data, are not counted).
  const SplashAttentionProblem p = SplashAttentionProblem::from(args);
  const SplashMask mask(p.mask, p.T, p.t);
  double visible = 0.0;
  for (int64_t r = 0; r < p.T; ++r) visible += static_cast<double>(mask.count(r));
  return 2.0 * visible * p.Hq * (p.D + p.d);
}

template <>
double ProblemOp<SplashAttentionProblem>::bytes(const BoundArgs& args) const {
  const SplashAttentionProblem p = SplashAttentionProblem::from(args);
  const double x = dtype_size(p.dtype);
  return x * (static_cast<double>(p.Hq) * p.T * (p.D + p.d) +
              static_cast<double>(p.Hkv) * p.t * (p.D + p.d));
}

}  // namespace tokamax
