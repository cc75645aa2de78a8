// ragged_paged_attention: binding (shapes and the metadata's values, so that no index reaches a
// kernel unchecked), tensors, counts, the token map and the cache update.
#include "ops/ragged_paged_attention/base.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

constexpr const char* kPrefix = "ragged_paged_attention: ";

[[noreturn]] void fail(const std::string& message, const char* field) {
  throw InvalidArgument(std::string(kPrefix) + message, field);
}

double read_number(const json& args, const char* name, double fallback, bool positive,
                   bool nonzero) {
  if (!args.contains(name) || args.at(name).is_null()) return fallback;
  const json& v = args.at(name);
  const bool ok = v.is_number() && std::isfinite(v.get<double>()) &&
                  (!positive || v.get<double>() > 0.0) && (!nonzero || v.get<double>() != 0.0);
  if (!ok) {
    fail(std::string(name) + " must be a finite number" + (positive ? " > 0" : "") +
             (nonzero ? " != 0" : "") + ", got " + v.dump(),
         name);
  }
  return v.get<double>();
}

}  // namespace

RaggedPagedAttentionProblem RaggedPagedAttentionProblem::from(const BoundArgs& args) {
  RaggedPagedAttentionProblem p;
  const TensorSpec q = args.tensor("queries"), cache = args.tensor("kv_cache");
  p.Tq = q.dims[0];
  p.Hq = q.dims[1];
  p.D = q.dims[2];
  p.q_dtype = q.dtype;
  p.Hkv = args.tensor("keys").dims[1];
  p.kv_dtype = cache.dtype;
  p.pages = cache.dims[0];
  p.page_size = cache.dims[1];
  p.Dp = cache.dims[3];
  p.kv_lens = args.option("kv_lens").get<std::vector<int64_t>>();
  p.page_indices = args.option("page_indices").get<std::vector<int64_t>>();
  p.cu_q_lens = args.option("cu_q_lens").get<std::vector<int64_t>>();
  p.distribution = args.option("distribution").get<std::vector<int64_t>>();
  p.S = static_cast<int64_t>(p.kv_lens.size());
  p.P = static_cast<int64_t>(p.page_indices.size()) / p.S;
  p.out_dtype = parse_dtype(args.option("out_dtype").get<std::string>());
  p.sm_scale = args.option("sm_scale").get<double>();
  p.sliding_window =
      args.option("sliding_window").is_null() ? 0 : args.option("sliding_window").get<int64_t>();
  p.soft_cap = args.option("soft_cap").is_null() ? 0.0 : args.option("soft_cap").get<double>();
  for (auto [name, field] : {std::pair{"q_scale", &p.q_scale}, std::pair{"k_scale", &p.k_scale},
                             std::pair{"v_scale", &p.v_scale}}) {
    if (!args.option(name).is_null()) *field = args.option(name).get<double>();
  }
  p.causal = args.option("use_causal_mask").get<bool>();
  p.skip_kv_update = args.option("skip_kv_update").get<bool>();
  p.return_lse = args.option("return_lse").get<bool>();
  return p;
}

template <>
BoundArgs ProblemOp<RaggedPagedAttentionProblem>::bind_canonical(const json& args) const {
  check_arg_names(
      kPrefix, args,
      {"queries", "keys", "values", "kv_cache", "kv_lens", "page_indices", "cu_q_lens",
       "distribution", "sm_scale", "sliding_window", "soft_cap", "mask_value", "q_scale", "k_scale",
       "v_scale", "use_causal_mask", "skip_kv_update", "return_lse", "out_dtype"});
  const TensorSpec q = read_tensor_arg(
      kPrefix, args, "queries", {.shape = "[Tq, Hq, D]", .example = "bf16[64,32,128]", .rank = 3});
  const TensorArgRule kv_rule{.shape = "[Tq, Hkv, D]",
                              .example = "bf16[64,8,128]",
                              .rank = 3,
                              .quantized_ok = true,
                              .quantized_note = "f8e4m3 with k_scale / v_scale"};
  const TensorSpec k = read_tensor_arg(kPrefix, args, "keys", kv_rule);
  const TensorSpec v = read_tensor_arg(kPrefix, args, "values", kv_rule);
  const TensorSpec cache = read_tensor_arg(kPrefix, args, "kv_cache",
                                           {.shape = "[pages, page_size, 2 Hkv, Dp]",
                                            .example = "bf16[512,16,16,128]",
                                            .rank = 4,
                                            .quantized_ok = true,
                                            .quantized_note = "f8e4m3 with k_scale / v_scale"});
  const int64_t Tq = q.dims[0], Hq = q.dims[1], D = q.dims[2], Hkv = k.dims[1];
  if (q.dtype == DType::kF64 || is_quantized(q.dtype)) {
    fail("queries must be f32, bf16 or f16, got " + q.to_string(), "queries");
  }
  if (k.dims != std::vector<int64_t>{Tq, Hkv, D} || Hkv < 1 || Hq % Hkv != 0) {
    fail("keys must be [Tq, Hkv, D] = [" + std::to_string(Tq) + ", Hkv, " + std::to_string(D) +
             "] with Hq = " + std::to_string(Hq) + " a multiple of Hkv, got " + k.to_string(),
         "keys");
  }
  if (v.dims != k.dims) fail("values must be keys' shape, got " + v.to_string(), "values");
  if (k.dtype != cache.dtype || v.dtype != cache.dtype) {
    fail("keys and values must be in kv_cache's dtype (" + std::string(dtype_name(cache.dtype)) +
             "), got keys " + k.to_string() + ", values " + v.to_string(),
         k.dtype != cache.dtype ? "keys" : "values");
  }
  if (cache.dtype == DType::kF64 || cache.dtype == DType::kI8) {
    fail("kv_cache must be f32, bf16, f16 or f8e4m3, got " + cache.to_string(), "kv_cache");
  }
  if (cache.dims[2] != 2 * Hkv || cache.dims[3] < D || cache.dims[1] < 1) {
    fail("kv_cache must be [pages, page_size >= 1, 2 Hkv = " + std::to_string(2 * Hkv) +
             ", Dp >= D = " + std::to_string(D) + "], got " + cache.to_string(),
         "kv_cache");
  }
  const int64_t pages = cache.dims[0], page_size = cache.dims[1];
  const std::vector<int64_t> kv_lens = read_int_list_arg(kPrefix, args, "kv_lens", "[S]");
  const std::vector<int64_t> page_indices =
      read_int_list_arg(kPrefix, args, "page_indices", "[S P]");
  const std::vector<int64_t> cu = read_int_list_arg(kPrefix, args, "cu_q_lens", "[S + 1]");
  const std::vector<int64_t> dist = read_int_list_arg(kPrefix, args, "distribution", "[3]");
  const int64_t S = static_cast<int64_t>(kv_lens.size());
  if (S < 1) fail("kv_lens must list at least one sequence", "kv_lens");
  if (page_indices.empty() || page_indices.size() % S != 0) {
    fail("page_indices must hold S P entries (P >= 1 pages per sequence, S = " + std::to_string(S) +
             "), got " + std::to_string(page_indices.size()),
         "page_indices");
  }
  const int64_t P = static_cast<int64_t>(page_indices.size()) / S;
  for (size_t i = 0; i < page_indices.size(); ++i) {
    if (page_indices[i] < 0 || page_indices[i] >= pages) {
      fail("page_indices[" + std::to_string(i) + "] = " + std::to_string(page_indices[i]) +
               " is outside the cache's " + std::to_string(pages) + " pages",
           "page_indices");
    }
  }
  if (static_cast<int64_t>(cu.size()) != S + 1) {
    fail("cu_q_lens must hold S + 1 = " + std::to_string(S + 1) + " entries, got " +
             std::to_string(cu.size()),
         "cu_q_lens");
  }
  for (int64_t s = 0; s <= S; ++s) {
    if (cu[s] < 0 || (s > 0 && cu[s] < cu[s - 1])) {
      fail("cu_q_lens must be non-negative and non-decreasing; cu_q_lens[" + std::to_string(s) +
               "] = " + std::to_string(cu[s]),
           "cu_q_lens");
    }
  }
  if (dist.size() != 3 || dist[0] < 0 || dist[0] > dist[1] || dist[1] > dist[2] || dist[2] > S) {
    fail("distribution must be [decode end, prefill end, active] with 0 <= d0 <= d1 <= d2 <= S = " +
             std::to_string(S) + ", got " + json(dist).dump(),
         "distribution");
  }
  if (cu[dist[2]] > Tq) {
    fail("cu_q_lens[active] = " + std::to_string(cu[dist[2]]) + " exceeds the " +
             std::to_string(Tq) + " query tokens",
         "cu_q_lens");
  }
  for (int64_t s = 0; s < dist[2]; ++s) {
    const int64_t q_len = cu[s + 1] - cu[s];
    if (kv_lens[s] < q_len || kv_lens[s] > P * page_size) {
      fail("kv_lens[" + std::to_string(s) + "] = " + std::to_string(kv_lens[s]) +
               " must cover the sequence's " + std::to_string(q_len) + " new tokens and fit its " +
               std::to_string(P * page_size) +
               " cache slots (a shorter one would place a token before the sequence's start)",
           "kv_lens");
    }
  }
  json out = {{"queries", q.to_string()}, {"keys", k.to_string()},
              {"values", v.to_string()},  {"kv_cache", cache.to_string()},
              {"kv_lens", kv_lens},       {"page_indices", page_indices},
              {"cu_q_lens", cu},          {"distribution", dist}};
  out["sm_scale"] = read_number(args, "sm_scale", 1.0, false, false);
  out["sliding_window"] = nullptr;
  if (args.contains("sliding_window") && !args.at("sliding_window").is_null()) {
    out["sliding_window"] = read_int_arg(kPrefix, args, "sliding_window", 1, INT64_MAX, "[1, ...]");
  }
  out["soft_cap"] = nullptr;
  if (args.contains("soft_cap") && !args.at("soft_cap").is_null()) {
    out["soft_cap"] = read_number(args, "soft_cap", 0.0, true, false);
  }
  // mask_value: upstream's reference masks with -1e30 whatever it is given; every valid token
  // here sees at least its own key, so the value never shows. Checked, then dropped.
  read_number(args, "mask_value", 0.0, false, false);
  for (const char* name : {"q_scale", "k_scale", "v_scale"}) {
    out[name] = nullptr;
    if (args.contains(name) && !args.at(name).is_null()) {
      out[name] = read_number(args, name, 1.0, false, true);
    }
  }
  out["use_causal_mask"] = read_bool_arg(kPrefix, args, "use_causal_mask", true);
  out["skip_kv_update"] = read_bool_arg(kPrefix, args, "skip_kv_update", false);
  out["return_lse"] = read_bool_arg(kPrefix, args, "return_lse", false);
  DType out_dtype = q.dtype;
  if (args.contains("out_dtype") && !args.at("out_dtype").is_null()) {
    const json& value = args.at("out_dtype");
    try {
      out_dtype = value.is_string() ? parse_dtype(value.get<std::string>()) : DType::kBool;
    } catch (const std::exception&) {
      out_dtype = DType::kBool;
    }
    if (!is_kernel_float(out_dtype)) {
      fail("out_dtype must be f32, bf16 or f16, got " + value.dump(), "out_dtype");
    }
  }
  out["out_dtype"] = std::string(dtype_name(out_dtype));
  BoundArgs bound;
  bound.op = std::string(RaggedPagedAttentionProblem::kOp);
  bound.args = std::move(out);
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<RaggedPagedAttentionProblem>::inputs(
    const BoundArgs& args) const {
  return {{"queries", args.tensor("queries")},
          {"keys", args.tensor("keys")},
          {"values", args.tensor("values")},
          {"kv_cache", args.tensor("kv_cache")}};
}

template <>
std::vector<TensorDecl> ProblemOp<RaggedPagedAttentionProblem>::outputs(
    const BoundArgs& args) const {
  const RaggedPagedAttentionProblem p = RaggedPagedAttentionProblem::from(args);
  std::vector<TensorDecl> decls = {{"out", TensorSpec{p.out_dtype, {p.Tq, p.Hq, p.D}}}};
  if (!p.skip_kv_update) decls.push_back({"updated_kv_cache", args.tensor("kv_cache")});
  if (p.return_lse) decls.push_back({"lse", TensorSpec{DType::kF32, {p.Tq, p.Hq}}});
  return decls;
}

RpaTokens::RpaTokens(const RaggedPagedAttentionProblem& p)
    : seq(static_cast<size_t>(p.Tq), -1), pos(static_cast<size_t>(p.Tq), 0) {
  for (int64_t s = 0; s < p.active(); ++s) {
    const int64_t q_len = p.cu_q_lens[s + 1] - p.cu_q_lens[s];
    for (int64_t t = p.cu_q_lens[s]; t < p.cu_q_lens[s + 1]; ++t) {
      seq[t] = s;
      pos[t] = p.kv_lens[s] - q_len + (t - p.cu_q_lens[s]);
    }
  }
}

std::pair<int64_t, int64_t> RpaTokens::key_range(const RaggedPagedAttentionProblem& p, int64_t s,
                                                 int64_t pos) {
  int64_t lo = 0, hi = p.kv_lens[s];
  if (p.causal) hi = std::min(hi, pos + 1);
  if (p.sliding_window > 0) lo = std::max<int64_t>(lo, pos - p.sliding_window + 1);
  return {lo, std::max(lo, hi)};
}

void rpa_update_cache(const RaggedPagedAttentionProblem& p, const RpaTokens& tokens,
                      const TensorMap& inputs, Tensor& cache) {
  const Tensor& source = inputs.at("kv_cache");
  std::memcpy(cache.raw(), source.raw(), source.size_bytes());
  if (p.skip_kv_update) return;
  const size_t size = dtype_size(p.kv_dtype);
  char* dst = static_cast<char*>(cache.raw());
  const char* keys = static_cast<const char*>(inputs.at("keys").raw());
  const char* values = static_cast<const char*>(inputs.at("values").raw());
  for (int64_t t = 0; t < p.Tq; ++t) {
    const int64_t s = tokens.seq[t];
    if (s < 0) continue;
    for (int64_t h = 0; h < p.Hkv; ++h) {
      for (int v = 0; v < 2; ++v) {
        char* row = dst + rpa_cache_at(p, s, tokens.pos[t], h, v) * size;
        std::memcpy(row, (v ? values : keys) + (t * p.Hkv + h) * p.D * size, p.D * size);
        std::memset(row + p.D * size, 0, (p.Dp - p.D) * size);  // zeros: +0 in every dtype
      }
    }
  }
}

template <>
double ProblemOp<RaggedPagedAttentionProblem>::flops(const BoundArgs& args) const {
  // Every valid token's visible keys: 2 D for its logit and 2 D for its share of P V, per head.
  const RaggedPagedAttentionProblem p = RaggedPagedAttentionProblem::from(args);
  const RpaTokens tokens(p);
  double keys = 0.0;
  for (int64_t t = 0; t < p.Tq; ++t) {
    if (tokens.seq[t] < 0) continue;
    const auto [lo, hi] = RpaTokens::key_range(p, tokens.seq[t], tokens.pos[t]);
    keys += static_cast<double>(hi - lo);
  }
  return 4.0 * keys * p.Hq * p.D;
}

template <>
double ProblemOp<RaggedPagedAttentionProblem>::bytes(const BoundArgs& args) const {
  // The K/V rows each active sequence's tokens see (read once per kv head), the queries, the
  // new K/V and the output; the cache copy of the update is not counted (an in-place cache, as
  // upstream donates it, has none).
  const RaggedPagedAttentionProblem p = RaggedPagedAttentionProblem::from(args);
  double rows = 0.0;
  for (int64_t s = 0; s < p.active(); ++s) rows += static_cast<double>(p.kv_lens[s]);
  const double kv = dtype_size(p.kv_dtype);
  return rows * 2.0 * p.Hkv * p.D * kv +
         static_cast<double>(p.Tq) * p.Hq * p.D *
             (dtype_size(p.q_dtype) + dtype_size(p.out_dtype)) +
         static_cast<double>(p.Tq) * 2.0 * p.Hkv * p.D * kv;
}

}  // namespace tokamax
