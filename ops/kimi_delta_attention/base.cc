// kimi_delta_attention: canonical binding, validation, tensors and counts.
//
// Dimensions: as base.h.
#include "ops/kimi_delta_attention/base.h"

#include <cmath>
#include <string>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

constexpr const char* kPrefix = "kimi_delta_attention: ";

[[noreturn]] void fail(const std::string& message, const char* field) {
  throw InvalidArgument(std::string(kPrefix) + message, field);
}

bool present(const json& args, const char* name) {
  return args.contains(name) && !args.at(name).is_null();
}

std::string dims_text(std::initializer_list<int64_t> dims) {
  std::string out = "[";
  for (const int64_t d : dims) out += (out.size() > 1 ? ", " : "") + std::to_string(d);
  return out + "]";
}

}  // namespace

KdaProblem KdaProblem::from(const BoundArgs& args) {
  KdaProblem p;
  const TensorSpec q = args.tensor("query"), v = args.tensor("value");
  p.H = q.dims[0];
  p.B = q.dims[1];
  p.T = q.dims[2];
  p.K = q.dims[3];
  p.V = v.dims[3];
  p.dtype = q.dtype;
  p.scale = args.option("scale").get<double>();
  p.use_qk_l2norm = args.option("use_qk_l2norm").get<bool>();
  p.use_gate_in_kernel = args.option("use_gate_in_kernel").get<bool>();
  if (!args.option("lower_bound").is_null())
    p.lower_bound = args.option("lower_bound").get<double>();
  p.has_delta_time_bias = args.has("delta_time_bias");
  p.has_segments = args.has("segment_ids");
  p.has_initial_state = args.has("initial_state");
  p.output_final_state = args.option("output_final_state").get<bool>();
  p.N = args.option("max_num_segments").is_null() ? 1
                                                  : args.option("max_num_segments").get<int64_t>();
  return p;
}

template <>
BoundArgs ProblemOp<KdaProblem>::bind_canonical(const json& args) const {
  if (!args.is_object()) fail("args must be a mapping", "query");
  check_arg_names(
      kPrefix, args,
      {"query", "key", "value", "gate", "beta", "a_log", "delta_time_bias", "scale",
       "initial_state", "output_final_state", "use_qk_l2norm", "use_gate_in_kernel", "segment_ids",
       "lower_bound", "max_num_segments", "return_residuals", "context_parallel_metadata"});
  const TensorSpec q =
      read_tensor_arg(kPrefix, args, "query",
                      {.shape = "[H, B, T, K]", .example = "bf16[32,1,8192,128]", .rank = 4});
  const int64_t H = q.dims[0], B = q.dims[1], T = q.dims[2], K = q.dims[3];
  if (q.dtype == DType::kF64 || is_quantized(q.dtype)) {
    fail("query must be f32, bf16 or f16, got " + q.to_string(), "query");
  }
  auto same_as_query = [&](const char* name, const char* shape, int64_t last) {
    const TensorSpec spec = read_tensor_arg(
        kPrefix, args, name, {.shape = shape, .example = "bf16[32,1,8192,128]", .rank = 4});
    if (spec.dtype != q.dtype || spec.dims[0] != H || spec.dims[1] != B || spec.dims[2] != T ||
        (last >= 0 && spec.dims[3] != last)) {
      fail(std::string(name) + " must be " + std::string(dtype_name(q.dtype)) +
               dims_text({H, B, T, last >= 0 ? last : spec.dims[3]}) + " (query's heads, batch, " +
               "tokens and dtype), got " + spec.to_string(),
           name);
    }
    return spec;
  };
  const TensorSpec k = same_as_query("key", "[H, B, T, K]", K);
  const TensorSpec v = same_as_query("value", "[H, B, T, V]", -1);
  const TensorSpec g = same_as_query("gate", "[H, B, T, K]", K);
  const TensorSpec beta = read_tensor_arg(
      kPrefix, args, "beta", {.shape = "[H, B, T]", .example = "bf16[32,1,8192]", .rank = 3});
  if (beta.dims != std::vector<int64_t>{H, B, T} || beta.dtype == DType::kF64 ||
      is_quantized(beta.dtype)) {
    fail("beta must be " + dims_text({H, B, T}) + " f32, bf16 or f16, got " + beta.to_string(),
         "beta");
  }
  json out = {{"query", q.to_string()},
              {"key", k.to_string()},
              {"value", v.to_string()},
              {"gate", g.to_string()},
              {"beta", beta.to_string()}};
  const bool gate_in_kernel = read_bool_arg(kPrefix, args, "use_gate_in_kernel", false);
  out["use_gate_in_kernel"] = gate_in_kernel;
  for (const auto& [name, len, shape] :
       {std::tuple{"a_log", H, "[H]"}, std::tuple{"delta_time_bias", H * K, "[H * K]"}}) {
    if (!present(args, name)) continue;
    if (!gate_in_kernel) {
      fail(std::string(name) + " is read only with use_gate_in_kernel: true", name);
    }
    const TensorSpec spec =
        read_tensor_arg(kPrefix, args, name, {.shape = shape, .example = "f32[32]", .rank = 1});
    if (spec.dims[0] != len || spec.dtype == DType::kF64 || is_quantized(spec.dtype)) {
      fail(std::string(name) + " must be " + shape + " = [" + std::to_string(len) +
               "] f32, bf16 or f16, got " + spec.to_string(),
           name);
    }
    out[name] = spec.to_string();
  }
  if (gate_in_kernel && !present(args, "a_log")) {
    fail("a_log [H] must be given with use_gate_in_kernel: true (upstream's rule)", "a_log");
  }
  out["lower_bound"] = nullptr;
  if (present(args, "lower_bound")) {
    const json& value = args.at("lower_bound");
    if (!gate_in_kernel)
      fail("lower_bound is read only with use_gate_in_kernel: true", "lower_bound");
    if (!value.is_number() || !(value.get<double>() >= -5.0) || !(value.get<double>() < 0.0)) {
      fail("lower_bound must be in [-5, 0), got " + value.dump(), "lower_bound");
    }
    out["lower_bound"] = value.get<double>();
  }
  double scale = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(K, 1)));
  if (present(args, "scale")) {
    const json& value = args.at("scale");
    if (!value.is_number() || !std::isfinite(value.get<double>())) {
      fail("scale must be a finite number, got " + value.dump(), "scale");
    }
    scale = value.get<double>();
  }
  out["scale"] = scale;
  out["use_qk_l2norm"] = read_bool_arg(kPrefix, args, "use_qk_l2norm", false);
  out["output_final_state"] = read_bool_arg(kPrefix, args, "output_final_state", false);
  if (read_bool_arg(kPrefix, args, "return_residuals", false)) {
    fail("return_residuals is not implemented (the VJP recomputes what it needs)",
         "return_residuals");
  }
  if (present(args, "context_parallel_metadata")) {
    fail("context_parallel_metadata (sharding over devices) has no counterpart on one host",
         "context_parallel_metadata");
  }
  // The state slots: initial_state's, else max_num_segments (required with segment ids), else 1.
  json slots = present(args, "max_num_segments") ? args.at("max_num_segments") : json();
  if (!slots.is_null() && (!slots.is_number_integer() || slots.get<int64_t>() < 1)) {
    fail("max_num_segments must be a positive integer, got " + slots.dump(), "max_num_segments");
  }
  if (present(args, "initial_state")) {
    const TensorSpec state =
        read_tensor_arg(kPrefix, args, "initial_state",
                        {.shape = "[B, N, H, K, V]", .example = "f32[1,1,32,128,128]", .rank = 5});
    if (state.dims[0] != B || state.dims[1] < 1 || state.dims[2] != H || state.dims[3] != K ||
        state.dims[4] != v.dims[3] || state.dtype == DType::kF64 || is_quantized(state.dtype)) {
      fail("initial_state must be [B, N, H, K, V] = " +
               dims_text({B, state.dims[1], H, K, v.dims[3]}) +
               " with N >= 1, f32, bf16 or f16, got " + state.to_string(),
           "initial_state");
    }
    if (!slots.is_null() && slots.get<int64_t>() != state.dims[1]) {
      fail("max_num_segments " + slots.dump() +
               " must match initial_state's N = " + std::to_string(state.dims[1]),
           "max_num_segments");
    }
    slots = state.dims[1];
    out["initial_state"] = state.to_string();
  }
  if (present(args, "segment_ids")) {
    const TensorSpec ids = read_tensor_arg(
        kPrefix, args, "segment_ids",
        {.shape = "[B, T]", .example = "i32[1,8192]", .rank = 2, .float_only = false});
    if (ids.dims != std::vector<int64_t>{B, T} || ids.dtype != DType::kI32) {
      fail("segment_ids must be i32" + dims_text({B, T}) + ", got " + ids.to_string(),
           "segment_ids");
    }
    if (slots.is_null()) {
      fail("max_num_segments is required with segment_ids and no initial_state (upstream's rule)",
           "max_num_segments");
    }
    out["segment_ids"] = ids.to_string();
  }
  out["max_num_segments"] = slots;
  BoundArgs bound;
  bound.op = std::string(KdaProblem::kOp);
  bound.args = std::move(out);
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<KdaProblem>::inputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls;
  for (const char* name : {"query", "key", "value", "gate", "beta", "a_log", "delta_time_bias",
                           "initial_state", "segment_ids"}) {
    if (args.has(name)) decls.push_back({name, args.tensor(name)});
  }
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<KdaProblem>::outputs(const BoundArgs& args) const {
  const KdaProblem p = KdaProblem::from(args);
  std::vector<TensorDecl> decls = {{"out", TensorSpec{p.dtype, {p.H, p.B, p.T, p.V}}}};
  if (p.output_final_state) {
    decls.push_back({"final_state", TensorSpec{DType::kF32, {p.B, p.N, p.H, p.K, p.V}}});
  }
  return decls;
}

template <>
double ProblemOp<KdaProblem>::flops(const BoundArgs& args) const {
  // Per token and head: the decay (K V), k^T S (2 K V), the rank-1 update (2 K V), q^T S (2 K V).
  const KdaProblem p = KdaProblem::from(args);
  return 7.0 * static_cast<double>(p.H) * p.B * p.T * p.K * p.V;
}

template <>
double ProblemOp<KdaProblem>::bytes(const BoundArgs& args) const {
  double total = 0.0;
  for (const TensorDecl& decl : inputs(args)) total += static_cast<double>(decl.spec.size_bytes());
  for (const TensorDecl& decl : outputs(args)) total += static_cast<double>(decl.spec.size_bytes());
  return total;
}

}  // namespace tokamax
