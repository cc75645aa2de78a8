// dot_product_attention: canonical binding, validation, FLOP/byte counts, masks and broadcasts.
//
// Dimensions.
//   *B     batch dimensions, B = prod(*B)
//   T, t   query and key/value positions
//   H, h   query and key/value heads, g = H / h
//   D, d   q/k and v head dimensions
#include "ops/dot_product_attention/base.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "ops/common/precision.h"
#include "ops/dot_product_attention/range_mask.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

constexpr const char* kOp = "dot_product_attention: ";

bool present(const json& args, const char* name) {
  return args.contains(name) && !args.at(name).is_null();
}

TensorSpec bind_spec(const json& args, const char* name, const char* shape_doc) {
  return read_tensor_arg(kOp, args, name,
                         {.shape = shape_doc, .example = "bf16[2,128,8,64]", .float_only = false});
}

TensorSpec bind_qkv(const json& args, const char* name, const char* shape_doc) {
  return read_tensor_arg(kOp, args, name,
                         {.shape = shape_doc, .example = "bf16[2,128,8,64]", .min_rank = 3});
}

// A tensor broadcastable to full = [*B, H, T, t] (numpy rules, right-aligned).
void check_broadcastable(const TensorSpec& spec, const std::vector<int64_t>& full,
                         const char* name) {
  const std::string full_text = TensorSpec{spec.dtype, full}.to_string();
  if (spec.rank() > static_cast<int>(full.size())) {
    throw InvalidArgument(std::string(kOp) + name + " " + spec.to_string() +
                              " has more dimensions than [*B, H, T, t] = " + full_text,
                          name);
  }
  const size_t shift = full.size() - spec.dims.size();
  for (size_t i = 0; i < spec.dims.size(); ++i) {
    if (spec.dims[i] != 1 && spec.dims[i] != full[shift + i]) {
      throw InvalidArgument(std::string(kOp) + name + " " + spec.to_string() +
                                " does not broadcast to [*B, H, T, t] = " + full_text +
                                " (dimension " + std::to_string(i) + ")",
                            name);
    }
  }
}

std::vector<int64_t> bind_lengths(const json& args, const char* name, int64_t B, int64_t limit,
                                  const char* limit_name) {
  const json& value = args.at(name);
  if (!value.is_array()) {
    throw InvalidArgument(std::string(kOp) + name + " must be a list of B=" + std::to_string(B) +
                              " integers (one per flattened batch), got " + value.dump(),
                          name);
  }
  if (static_cast<int64_t>(value.size()) != B) {
    throw InvalidArgument(std::string(kOp) + name + " has " + std::to_string(value.size()) +
                              " entries but the batch has B=" + std::to_string(B),
                          name);
  }
  std::vector<int64_t> lengths;
  for (size_t b = 0; b < value.size(); ++b) {
    if (!value[b].is_number_integer() || value[b].get<int64_t>() < 0 ||
        value[b].get<int64_t>() > limit) {
      throw InvalidArgument(std::string(kOp) + name + "[" + std::to_string(b) + "] is " +
                                value[b].dump() + "; lengths must be integers in [0, " +
                                limit_name + "=" + std::to_string(limit) + "]",
                            name);
    }
    lengths.push_back(value[b].get<int64_t>());
  }
  return lengths;
}

double bind_positive(const json& args, const char* name) {
  const json& value = args.at(name);
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() <= 0.0) {
    throw InvalidArgument(
        std::string(kOp) + name + " must be a positive number, got " + value.dump(), name);
  }
  return value.get<double>();
}

}  // namespace

AttentionProblem AttentionProblem::from(const BoundArgs& args) {
  AttentionProblem p;
  const TensorSpec q = args.tensor("q"), k = args.tensor("k"), v = args.tensor("v");
  const int nb = q.rank() - 3;
  p.batch.assign(q.dims.begin(), q.dims.begin() + nb);
  p.B = 1;
  for (int64_t extent : p.batch) p.B *= extent;
  p.T = q.dims[nb];
  p.H = q.dims[nb + 1];
  p.D = q.dims[nb + 2];
  p.t = k.dims[nb];
  p.h = k.dims[nb + 1];
  p.d = v.dims[nb + 2];
  p.dtype = q.dtype;
  p.logits_scale = args.option("logits_scale").get<double>();
  // Absent unless true: the default keeps the canonical args (and cache keys) of before.
  p.return_residuals = args.has("return_residuals") && args.option("return_residuals").get<bool>();
  p.normalize_output = !args.has("normalize_output") || args.option("normalize_output").get<bool>();
  if (args.has("dropout_mask")) {
    p.dropout_mask = args.tensor("dropout_mask");
    p.dropout_rate = args.option("dropout_rate").get<double>();
  }
  p.is_causal = args.option("is_causal").get<bool>();
  if (args.has("causal_mask")) {
    const json& causal = args.option("causal_mask");
    p.is_causal = true;
    p.causal_offset = causal.at("offset").get<int64_t>();
    if (!causal.at("window_size").is_null())
      p.causal_window = causal.at("window_size").get<int64_t>();
  }
  const json& cap = args.option("logits_soft_cap");
  p.logits_soft_cap = cap.is_null() ? 0.0 : cap.get<double>();
  if (!args.option("bias").is_null()) p.bias = args.tensor("bias");
  if (!args.option("mask").is_null()) p.mask = args.tensor("mask");
  const json& q_len = args.option("q_seq_lengths");
  if (!q_len.is_null()) p.q_seq_lengths = q_len.get<std::vector<int64_t>>();
  const json& kv_len = args.option("kv_seq_lengths");
  if (!kv_len.is_null()) p.kv_seq_lengths = kv_len.get<std::vector<int64_t>>();
  std::optional<TensorSpec>* ranges[] = {&p.q_start, &p.q_end,     &p.k_start,
                                         &p.k_end,   &p.q_indices, &p.k_indices};
  for (int n = 0; n < 6; ++n) {
    if (args.has(kAttentionRangeNames[n])) *ranges[n] = args.tensor(kAttentionRangeNames[n]);
  }
  p.bf16_logits = args.has("logits_dtype") && args.option("logits_dtype") == "bf16";
  // Upstream compares token indices, when given, under the causal mask too.
  p.causal_in_key_mask = p.is_causal && (p.q_indices || p.k_indices);
  const json& window = args.option("local_window");
  if (!window.is_null()) {
    p.window_left = window[0].get<int64_t>();
    p.window_right = window[1].get<int64_t>();
  }
  return p;
}

const std::vector<ArgAlias>& attention_arg_aliases() {
  // Upstream's public API (tokamax.dot_product_attention, as jax.nn.dot_product_attention)
  // spells these differently from its op's bind; both load unchanged.
  static const std::vector<ArgAlias> aliases = {{"scale", "logits_scale"},
                                                {"query_seq_lengths", "q_seq_lengths"},
                                                {"key_value_seq_lengths", "kv_seq_lengths"},
                                                {"local_window_size", "local_window"}};
  return aliases;
}

namespace {

// Upstream's `precision`: one name for both products or a pair [qk, pv]. Accepted where it keeps
// the operands as they are (default, high, highest, and presets these dtypes already satisfy),
// which every implementation computes; a preset that rounds the operands is refused by name
// (docs/precision.md). Accepted values change nothing, so they stay out of the canonical form.
void bind_attention_precision(const json& args, DType q, DType k, DType v) {
  if (!args.contains("precision") || args.at("precision").is_null()) return;
  const json& value = args.at("precision");
  std::vector<std::string> names;
  if (value.is_string()) {
    names = {value.get<std::string>(), value.get<std::string>()};
  } else if (value.is_array() && value.size() == 2 && value[0].is_string() &&
             value[1].is_string()) {
    names = {value[0].get<std::string>(), value[1].get<std::string>()};
  } else {
    throw InvalidArgument(std::string(kOp) +
                              "precision must be a name or a pair [qk, pv] of names, got " +
                              value.dump(),
                          "precision");
  }
  // qk multiplies q by k; pv the probabilities by v, the probabilities rounded to v's type when
  // that is 16-bit (as upstream's kernels do) and f32 otherwise.
  const std::pair<DType, DType> operands[] = {{q, k}, {v, v}};
  for (int i = 0; i < 2; ++i) {
    try {
      const DotPrecision precision = parse_precision(names[i]);
      if (!plan_precision(precision, operands[i].first, operands[i].second).identity()) {
        throw InvalidArgument("precision=" + names[i] + " rounds the " +
                                  (i == 0 ? std::string("qk") : std::string("pv")) +
                                  " product's operands, which attention does not implement yet "
                                  "(default, high, highest, f32_f32_f32 and presets these dtypes "
                                  "already satisfy run)",
                              "precision");
      }
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string(kOp) + e.what(), "precision");
    }
  }
}

}  // namespace

namespace {

// `mask` given as upstream's mask object rather than a bool tensor: CausalMask(offset,
// window_size) as {"offset": o, "window_size": w} or Mask(causal_mask=...) as {"causal_mask":
// {...}}; canonical as "causal_mask": {"offset": o, "window_size": w or null} (which bind also
// takes back as an argument).
void bind_causal_mask(const json& mask, json& out) {
  const std::string form =
      "mask as an object is upstream's CausalMask: {offset: int, window_size: int >= 1 or null}, "
      "or {causal_mask: {...}}";
  const json& causal = mask.contains("causal_mask") ? mask.at("causal_mask") : mask;
  size_t ranges = 0;
  for (const auto& [key, value] : mask.items()) {
    if (is_attention_range_name(key)) {
      ++ranges;  // bound by bind_attention_ranges
      continue;
    }
    if (key != "causal_mask" && key != "offset" && key != "window_size") {
      throw InvalidArgument(std::string(kOp) + "mask." + key +
                                " is not supported (the bool mask is a tensor argument); " + form +
                                ", with upstream's Mask ranges q_start, q_end, k_start, "
                                "k_end and the indices q_indices, k_indices as i32 tensors",
                            "mask");
    }
  }
  if (ranges > 0 && ranges == mask.size()) return;  // ranges alone: no causal mask
  if (!causal.is_object() || (mask.contains("causal_mask") && mask.size() != 1 + ranges)) {
    throw InvalidArgument(std::string(kOp) + form + ", got " + mask.dump(), "mask");
  }
  json bound = {{"offset", 0}, {"window_size", nullptr}};
  for (const auto& [key, value] : causal.items()) {
    if (&causal == &mask && is_attention_range_name(key)) continue;
    if (key == "offset" && value.is_number_integer()) {
      bound["offset"] = value;
    } else if (key == "window_size" &&
               (value.is_null() || (value.is_number_integer() && value.get<int64_t>() >= 1))) {
      bound["window_size"] = value;
    } else {
      throw InvalidArgument(std::string(kOp) + form + "; got " + key + " = " + value.dump(),
                            "mask");
    }
  }
  out["causal_mask"] = bound;
}

}  // namespace

template <>
BoundArgs ProblemOp<AttentionProblem>::bind_canonical(const json& raw_args) const {
  if (!raw_args.is_object()) throw InvalidArgument(std::string(kOp) + "args must be a mapping");
  json args = resolve_arg_aliases(raw_args, attention_arg_aliases(), kOp);
  // local_window_size as upstream's API takes it: one int w is the window (w, w).
  if (raw_args.contains("local_window_size") && args.at("local_window").is_number_integer()) {
    const json w = args.at("local_window");
    args["local_window"] = json::array({w, w});
  }
  check_arg_names(kOp, args,
                  {"q",
                   "k",
                   "v",
                   "bias",
                   "mask",
                   "causal_mask",
                   "is_causal",
                   "logits_scale",
                   "logits_soft_cap",
                   "q_seq_lengths",
                   "kv_seq_lengths",
                   "local_window",
                   "return_residuals",
                   "normalize_output",
                   "dropout_mask",
                   "dropout_rate",
                   "logits_dtype",
                   "precision",
                   "q_start",
                   "q_end",
                   "k_start",
                   "k_end",
                   "q_indices",
                   "k_indices"});
  const TensorSpec q = bind_qkv(args, "q", "[*B, T, H, D]");
  const TensorSpec k = bind_qkv(args, "k", "[*B, t, h, D]");
  const TensorSpec v = bind_qkv(args, "v", "[*B, t, h, d]");
  const int nb = q.rank() - 3;
  for (const auto& [name, spec] : {std::pair<const char*, const TensorSpec&>{"k", k}, {"v", v}}) {
    if (spec.rank() != q.rank() ||
        !std::equal(q.dims.begin(), q.dims.begin() + nb, spec.dims.begin())) {
      throw InvalidArgument(std::string(kOp) + name + " " + spec.to_string() +
                                " must have q's batch dimensions *B (q is " + q.to_string() + ")",
                            name);
    }
    if (spec.dtype != q.dtype) {
      throw InvalidArgument(std::string(kOp) + name + " is " + spec.to_string() + " but q is " +
                                std::string(dtype_name(q.dtype)) +
                                "; q, k and v must share one dtype",
                            name);
    }
  }
  const int64_t T = q.dims[nb], H = q.dims[nb + 1], D = q.dims[nb + 2];
  const int64_t t = k.dims[nb], h = k.dims[nb + 1];
  if (k.dims[nb + 2] != D) {
    throw InvalidArgument(std::string(kOp) + "k " + k.to_string() + " has D=" +
                              std::to_string(k.dims[nb + 2]) + " but q has D=" + std::to_string(D),
                          "k");
  }
  if (v.dims[nb] != t || v.dims[nb + 1] != h) {
    throw InvalidArgument(std::string(kOp) + "v " + v.to_string() + " must have k's [t, h] = [" +
                              std::to_string(t) + ", " + std::to_string(h) + "]",
                          "v");
  }
  if (h < 1 || H % h != 0) {
    throw InvalidArgument(std::string(kOp) + "q has H=" + std::to_string(H) +
                              " heads, which must be a positive multiple of k's h=" +
                              std::to_string(h) + " (grouped-query attention)",
                          "k");
  }
  int64_t B = 1;
  for (int i = 0; i < nb; ++i) B *= q.dims[i];
  std::vector<int64_t> full(q.dims.begin(), q.dims.begin() + nb);
  full.insert(full.end(), {H, T, t});

  bind_attention_precision(args, q.dtype, k.dtype, v.dtype);
  // Upstream's logits_dtype: the logits' dtype after q k^T. AUTO (the q k^T accumulator's: f32,
  // f64 for f64 inputs) and naming that dtype keep them there; bf16 rounds the finished
  // logits to bf16 (canonical only then). Other dtypes are refused, never ignored.
  bool bf16_logits = false;
  if (present(args, "logits_dtype")) {
    const json& value = args.at("logits_dtype");
    const DType accumulator = q.dtype == DType::kF64 ? DType::kF64 : DType::kF32;
    bool ok = value.is_string() && (value == "auto" || value == "AUTO");
    if (!ok && value.is_string()) {
      try {
        const DType dtype = parse_dtype(value.get<std::string>());
        bf16_logits = dtype == DType::kBF16 && accumulator == DType::kF32;
        ok = dtype == accumulator || bf16_logits;
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok) {
      throw InvalidArgument(std::string(kOp) + "logits_dtype " + value.dump() +
                                " is not implemented: give auto, " +
                                std::string(dtype_name(accumulator)) +
                                (accumulator == DType::kF32 ? " or bf16" : "") +
                                " (the logits are computed in the accumulator's dtype and rounded "
                                "to bf16 when asked)",
                            "logits_dtype");
    }
  }
  BoundArgs bound;
  bound.op = "dot_product_attention";
  json& out = bound.args;
  out["q"] = q.to_string();
  if (bf16_logits) out["logits_dtype"] = "bf16";
  out["k"] = k.to_string();
  out["v"] = v.to_string();
  out["bias"] = nullptr;
  if (present(args, "bias")) {
    const TensorSpec bias = bind_spec(args, "bias", "broadcastable to [*B, H, T, t]");
    if (!is_floating(bias.dtype)) {
      throw InvalidArgument(
          std::string(kOp) + "bias must be a float tensor, got " + bias.to_string(), "bias");
    }
    check_broadcastable(bias, full, "bias");
    out["bias"] = bias.to_string();
  }
  out["mask"] = nullptr;
  if (present(args, "causal_mask")) {
    if (present(args, "mask") && args.at("mask").is_object()) {
      throw InvalidArgument(std::string(kOp) + "give the causal mask once: as mask or causal_mask",
                            "causal_mask");
    }
    bind_causal_mask(json{{"causal_mask", args.at("causal_mask")}}, out);
  }
  const bool mask_object = present(args, "mask") && args.at("mask").is_object();
  bind_attention_ranges(args, mask_object ? &args.at("mask") : nullptr,
                        std::vector<int64_t>(q.dims.begin(), q.dims.begin() + nb), H, T, t, out);
  if (mask_object) {
    bind_causal_mask(args.at("mask"), out);
  } else if (present(args, "mask")) {
    const TensorSpec mask = bind_spec(args, "mask", "broadcastable to [*B, H, T, t]");
    if (mask.dtype != DType::kBool) {
      throw InvalidArgument(
          std::string(kOp) + "mask must be a bool tensor (true = keep), got " + mask.to_string(),
          "mask");
    }
    check_broadcastable(mask, full, "mask");
    out["mask"] = mask.to_string();
  }
  out["is_causal"] = read_bool_arg(kOp, args, "is_causal");
  if (out.contains("causal_mask") && out["is_causal"].get<bool>()) {
    // is_causal is CausalMask(): the two AND together as upstream's CausalMask.__and__ merges
    // them (the smaller offset; the window keeps its lower bound).
    json& causal = out["causal_mask"];
    const int64_t offset = causal["offset"].get<int64_t>();
    const int64_t merged = std::min<int64_t>(offset, 0);
    if (!causal["window_size"].is_null()) {
      causal["window_size"] = merged - (offset - causal["window_size"].get<int64_t>());
    }
    causal["offset"] = merged;
    out["is_causal"] = false;
  }
  out["logits_scale"] = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(D, 1)));
  if (present(args, "logits_scale")) {
    const json& value = args.at("logits_scale");
    if (!value.is_number() || !std::isfinite(value.get<double>())) {
      throw InvalidArgument(
          std::string(kOp) + "logits_scale must be a finite number, got " + value.dump(),
          "logits_scale");
    }
    out["logits_scale"] = value.get<double>();
  }
  out["logits_soft_cap"] = nullptr;
  if (present(args, "logits_soft_cap")) {
    out["logits_soft_cap"] = bind_positive(args, "logits_soft_cap");
  }
  out["q_seq_lengths"] = nullptr;
  if (present(args, "q_seq_lengths")) {
    out["q_seq_lengths"] = bind_lengths(args, "q_seq_lengths", B, T, "T");
  }
  out["kv_seq_lengths"] = nullptr;
  if (present(args, "kv_seq_lengths")) {
    out["kv_seq_lengths"] = bind_lengths(args, "kv_seq_lengths", B, t, "t");
  }
  // Only when true: at its default the option stays out of the canonical args.
  if (read_bool_arg(kOp, args, "return_residuals")) out["return_residuals"] = true;
  // Dropout, in the canonical args only when a mask is given (upstream: a rate without a mask is
  // an error; a mask at rate 0 only drops).
  double rate = 0.0;
  if (present(args, "dropout_rate")) {
    const json& value = args.at("dropout_rate");
    if (!value.is_number() || !(value.get<double>() >= 0.0) || !(value.get<double>() < 1.0)) {
      throw InvalidArgument(
          std::string(kOp) + "dropout_rate must be a number in [0, 1), got " + value.dump(),
          "dropout_rate");
    }
    rate = value.get<double>();
  }
  if (present(args, "dropout_mask")) {
    const TensorSpec drop = bind_spec(args, "dropout_mask", "broadcastable to [*B, H, T, t]");
    if (drop.dtype != DType::kBool) {
      throw InvalidArgument(std::string(kOp) +
                                "dropout_mask must be a bool tensor (true = keep), got " +
                                drop.to_string(),
                            "dropout_mask");
    }
    check_broadcastable(drop, full, "dropout_mask");
    out["dropout_mask"] = drop.to_string();
    out["dropout_rate"] = rate;
  } else if (rate != 0.0) {
    throw InvalidArgument(std::string(kOp) + "dropout_rate " + json(rate).dump() +
                              " needs a dropout_mask (upstream's rule)",
                          "dropout_rate");
  }
  // Only when false (its default true stays out of the canonical args).
  if (present(args, "normalize_output") && !read_bool_arg(kOp, args, "normalize_output")) {
    out["normalize_output"] = false;
  }
  out["local_window"] = nullptr;
  if (present(args, "local_window")) {
    const json& value = args.at("local_window");
    const bool ok = value.is_array() && value.size() == 2 && value[0].is_number_integer() &&
                    value[1].is_number_integer() && value[0].get<int64_t>() >= 0 &&
                    value[1].get<int64_t>() >= 0;
    if (!ok) {
      throw InvalidArgument(std::string(kOp) +
                                "local_window must be [left, right], two integers >= 0 (key j "
                                "visible from row i iff i - left <= j <= i + right), got " +
                                value.dump(),
                            "local_window");
    }
    out["local_window"] = value;
  }
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<AttentionProblem>::inputs(const BoundArgs& args) const {
  const AttentionProblem p = AttentionProblem::from(args);
  std::vector<TensorDecl> decls = {
      {"q", args.tensor("q")}, {"k", args.tensor("k")}, {"v", args.tensor("v")}};
  if (p.bias) decls.push_back({"bias", *p.bias});
  if (p.mask) decls.push_back({"mask", *p.mask});
  if (p.dropout_mask) decls.push_back({"dropout_mask", *p.dropout_mask});
  for (const char* name : kAttentionRangeNames) {
    if (args.has(name)) decls.push_back({name, args.tensor(name)});
  }
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<AttentionProblem>::outputs(const BoundArgs& args) const {
  const AttentionProblem p = AttentionProblem::from(args);
  std::vector<int64_t> dims = p.batch;
  dims.insert(dims.end(), {p.T, p.H, p.d});
  std::vector<TensorDecl> decls = {{"out", TensorSpec{p.dtype, dims}}};
  if (p.return_residuals) {
    std::vector<int64_t> lse_dims = p.batch;
    lse_dims.insert(lse_dims.end(), {p.H, p.T});
    decls.push_back({"lse", TensorSpec{DType::kF32, lse_dims}});
  }
  return decls;
}

template <>
double ProblemOp<AttentionProblem>::flops(const BoundArgs& args) const {
  // The standard count (FlashAttention's): 2*T*t*D for Q K^T plus 2*T*t*d for P V per head,
  // halved under is_causal, so the rate compares with other kernels' reports. A local window or
  // a causal band counts its visible entries instead (the kernels skip the rest, and the full
  // count would put the rate over the roofline); bool masks and sequence lengths are not
  // discounted, softmax work is not counted.
  const AttentionProblem p = AttentionProblem::from(args);
  if (p.has_local_window() || p.has_causal_band()) {
    return 2.0 * p.visible_entries() * p.H * (p.D + p.d);
  }
  const double full = 2.0 * static_cast<double>(p.B) * p.H * p.T * p.t * (p.D + p.d);
  return p.is_causal ? 0.5 * full : full;
}

template <>
double ProblemOp<AttentionProblem>::bytes(const BoundArgs& args) const {
  double total = 0.0;
  for (const TensorDecl& decl : inputs(args)) total += static_cast<double>(decl.spec.size_bytes());
  for (const TensorDecl& decl : outputs(args)) total += static_cast<double>(decl.spec.size_bytes());
  return total;
}

}  // namespace tokamax
