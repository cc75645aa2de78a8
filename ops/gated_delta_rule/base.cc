// gated_delta_rule: binding (shapes and the metadata's values, so that no index reaches a kernel
// unchecked), tensors and counts.
//
// Dimensions: as base.h.
#include "ops/gated_delta_rule/base.h"

#include <cmath>
#include <cstring>
#include <set>
#include <string>

#include "ops/framework/errors.h"

namespace tokamax {
namespace {

using nlohmann::json;

constexpr const char* kPrefix = "gated_delta_rule: ";

[[noreturn]] void fail(const std::string& message, const char* field) {
  throw InvalidArgument(std::string(kPrefix) + message, field);
}

std::string dims_text(std::initializer_list<int64_t> dims) {
  std::string out = "[";
  for (const int64_t d : dims) out += (out.size() > 1 ? ", " : "") + std::to_string(d);
  return out + "]";
}

// An int option that must equal what the shapes say (upstream passes it; here it may be left
// out).
void check_extent(const json& args, const char* name, int64_t expected, const std::string& why) {
  if (!args.contains(name) || args.at(name).is_null()) return;
  const json& v = args.at(name);
  if (!v.is_number_integer() || v.get<int64_t>() != expected) {
    fail(std::string(name) + " is " + v.dump() + " but " + why + " say " + std::to_string(expected),
         name);
  }
}

}  // namespace

GdnProblem GdnProblem::from(const BoundArgs& args) {
  GdnProblem p;
  const TensorSpec qkv = args.tensor("qkv"), state = args.tensor("recurrent_state");
  p.T = qkv.dims[0];
  p.C = qkv.dims[1];
  p.dtype = qkv.dtype;
  p.NB = state.dims[0];
  p.n_v = state.dims[1];
  p.d_k = state.dims[2];
  p.d_v = state.dims[3];
  p.state_dtype = state.dtype;
  p.W = args.tensor("conv_weight").dims[2];
  p.n_kq = (p.C - p.n_v * p.d_v) / (2 * p.d_k);
  p.has_conv_bias = args.has("conv_bias");
  p.query_start_loc = args.option("query_start_loc").get<std::vector<int64_t>>();
  p.state_indices = args.option("state_indices").get<std::vector<int64_t>>();
  p.distribution = args.option("distribution").get<std::vector<int64_t>>();
  p.seq_lens = args.option("seq_lens").get<std::vector<int64_t>>();
  p.R = static_cast<int64_t>(p.state_indices.size());
  return p;
}

template <>
BoundArgs ProblemOp<GdnProblem>::bind_canonical(const json& args) const {
  if (!args.is_object()) fail("args must be a mapping", "qkv");
  check_arg_names(kPrefix, args,
                  {"qkv", "b", "a", "conv_state", "recurrent_state", "conv_weight", "conv_bias",
                   "a_log", "dt_bias", "query_start_loc", "state_indices", "distribution",
                   "seq_lens", "n_kq", "n_v", "d_k", "d_v", "kernel_size"});
  const TensorSpec qkv = read_tensor_arg(
      kPrefix, args, "qkv", {.shape = "[T, C]", .example = "bf16[2048,1536]", .rank = 2});
  if (!is_kernel_float(qkv.dtype))
    fail("qkv must be f32, bf16 or f16, got " + qkv.to_string(), "qkv");
  const TensorSpec state =
      read_tensor_arg(kPrefix, args, "recurrent_state",
                      {.shape = "[NB, n_v, d_k, d_v]", .example = "bf16[2,8,128,128]", .rank = 4});
  if (!is_kernel_float(state.dtype)) {
    fail("recurrent_state must be f32, bf16 or f16, got " + state.to_string(), "recurrent_state");
  }
  const int64_t T = qkv.dims[0], C = qkv.dims[1], NB = state.dims[0], n_v = state.dims[1],
                d_k = state.dims[2], d_v = state.dims[3];
  if (n_v < 1 || d_k < 1 || d_v < 1 || NB < 1) {
    fail("recurrent_state must be [NB, n_v, d_k, d_v] with every extent >= 1, got " +
             state.to_string(),
         "recurrent_state");
  }
  const int64_t kq = C - n_v * d_v;
  if (kq <= 0 || kq % (2 * d_k) != 0 || n_v % (kq / (2 * d_k)) != 0) {
    fail("qkv's C = " + std::to_string(C) + " must be 2 n_kq d_k + n_v d_v with n_v = " +
             std::to_string(n_v) + " a multiple of n_kq >= 1 (d_k " + std::to_string(d_k) +
             ", d_v " + std::to_string(d_v) + " from recurrent_state)",
         "qkv");
  }
  const int64_t n_kq = kq / (2 * d_k);
  const TensorSpec weight = read_tensor_arg(
      kPrefix, args, "conv_weight", {.shape = "[C, 1, W]", .example = "bf16[1536,1,4]", .rank = 3});
  const int64_t W = weight.dims[2];
  if (weight.dims[0] != C || weight.dims[1] != 1 || W < 1) {
    fail("conv_weight must be [C, 1, W] = " + dims_text({C, 1, W}) + " with W >= 1, got " +
             weight.to_string(),
         "conv_weight");
  }
  const TensorSpec conv =
      read_tensor_arg(kPrefix, args, "conv_state",
                      {.shape = "[NB, W - 1, C]", .example = "bf16[2,3,1536]", .rank = 3});
  if (conv.dims != std::vector<int64_t>{NB, W - 1, C} || conv.dtype != qkv.dtype) {
    fail("conv_state must be " + std::string(dtype_name(qkv.dtype)) + dims_text({NB, W - 1, C}) +
             " (the state slots, kernel_size - 1 rows, qkv's channels and dtype), got " +
             conv.to_string(),
         "conv_state");
  }
  json out = {{"qkv", qkv.to_string()},
              {"recurrent_state", state.to_string()},
              {"conv_weight", weight.to_string()},
              {"conv_state", conv.to_string()}};
  for (const auto& [name, dims, shape] :
       {std::tuple{"b", std::vector<int64_t>{T, n_v}, "[T, n_v]"},
        std::tuple{"a", std::vector<int64_t>{T, n_v}, "[T, n_v]"},
        std::tuple{"a_log", std::vector<int64_t>{n_v}, "[n_v]"},
        std::tuple{"dt_bias", std::vector<int64_t>{n_v}, "[n_v]"},
        std::tuple{"conv_bias", std::vector<int64_t>{C}, "[C]"}}) {
    if (std::string(name) == "conv_bias" && (!args.contains(name) || args.at(name).is_null())) {
      continue;
    }
    const TensorSpec spec = read_tensor_arg(kPrefix, args, name, {.shape = shape});
    if (spec.dims != dims || !is_kernel_float(spec.dtype)) {
      fail(std::string(name) + " must be " + shape + " = " +
               TensorSpec{spec.dtype, dims}.to_string() + " in f32, bf16 or f16, got " +
               spec.to_string(),
           name);
    }
    out[name] = spec.to_string();
  }
  check_extent(args, "n_kq", n_kq, "qkv's and recurrent_state's shapes");
  check_extent(args, "n_v", n_v, "recurrent_state's shape");
  check_extent(args, "d_k", d_k, "recurrent_state's shape");
  check_extent(args, "d_v", d_v, "recurrent_state's shape");
  check_extent(args, "kernel_size", W, "conv_weight's shape");
  const std::vector<int64_t> qsl = read_int_list_arg(kPrefix, args, "query_start_loc", "[R + 1]");
  const std::vector<int64_t> slots = read_int_list_arg(kPrefix, args, "state_indices", "[R]");
  const std::vector<int64_t> dist = read_int_list_arg(kPrefix, args, "distribution", "[3]");
  const std::vector<int64_t> seq_lens = read_int_list_arg(kPrefix, args, "seq_lens", "[R]");
  const int64_t R = static_cast<int64_t>(slots.size());
  if (R < 1) fail("state_indices must list at least one request", "state_indices");
  if (static_cast<int64_t>(qsl.size()) != R + 1) {
    fail("query_start_loc must hold R + 1 = " + std::to_string(R + 1) + " entries, got " +
             std::to_string(qsl.size()),
         "query_start_loc");
  }
  if (static_cast<int64_t>(seq_lens.size()) != R) {
    fail("seq_lens must hold R = " + std::to_string(R) + " entries, got " +
             std::to_string(seq_lens.size()),
         "seq_lens");
  }
  if (dist.size() != 3 || dist[0] < 0 || dist[0] > dist[1] || dist[1] > dist[2] || dist[2] > R) {
    fail("distribution must be [decode end, prefill end, active] with 0 <= d0 <= d1 <= d2 <= R = " +
             std::to_string(R) + ", got " + json(dist).dump(),
         "distribution");
  }
  const int64_t A = dist[2];
  if (qsl[0] != 0) {
    // upstream would run tokens before it as request 0's (its request map clips to 0)
    fail("query_start_loc[0] must be 0, got " + std::to_string(qsl[0]), "query_start_loc");
  }
  for (int64_t r = 0; r <= R; ++r) {
    if (qsl[r] < 0 || qsl[r] > T || (r > 0 && r <= A && qsl[r] < qsl[r - 1])) {
      fail("query_start_loc must lie in [0, T = " + std::to_string(T) +
               "] and not decrease over the active requests; query_start_loc[" + std::to_string(r) +
               "] = " + std::to_string(qsl[r]),
           "query_start_loc");
    }
  }
  std::set<int64_t> seen;
  for (int64_t r = 0; r < R; ++r) {
    if (slots[r] < 0 || slots[r] >= NB || !seen.insert(slots[r]).second) {
      fail("state_indices[" + std::to_string(r) + "] = " + std::to_string(slots[r]) +
               (slots[r] < 0 || slots[r] >= NB
                    ? " is outside the " + std::to_string(NB) + " state slots"
                    : " repeats a slot (each request owns its own)"),
           "state_indices");
    }
    if (seq_lens[r] < 0 || (r < A && seq_lens[r] < qsl[r + 1] - qsl[r])) {
      fail("seq_lens[" + std::to_string(r) + "] = " + std::to_string(seq_lens[r]) +
               " must be >= 0 and cover an active request's " +
               std::to_string(r < A ? qsl[r + 1] - qsl[r] : 0) + " new tokens",
           "seq_lens");
    }
  }
  if (dist[0] == dist[2]) {  // upstream's decode-only branch maps token r to request r
    for (int64_t r = 0; r <= A; ++r) {
      if (qsl[r] != r) {
        fail("distribution " + json(dist).dump() +
                 " says decode only, so every active request has one token (query_start_loc[r] "
                 "= r); query_start_loc[" +
                 std::to_string(r) + "] = " + std::to_string(qsl[r]),
             "query_start_loc");
      }
    }
  }
  out["query_start_loc"] = qsl;
  out["state_indices"] = slots;
  out["distribution"] = dist;
  out["seq_lens"] = seq_lens;
  BoundArgs bound;
  bound.op = std::string(GdnProblem::kOp);
  bound.args = std::move(out);
  return bound;
}

template <>
std::vector<TensorDecl> ProblemOp<GdnProblem>::inputs(const BoundArgs& args) const {
  std::vector<TensorDecl> decls;
  for (const char* name : {"qkv", "b", "a", "conv_state", "recurrent_state", "conv_weight",
                           "conv_bias", "a_log", "dt_bias"}) {
    if (args.has(name)) decls.push_back({name, args.tensor(name)});
  }
  return decls;
}

template <>
std::vector<TensorDecl> ProblemOp<GdnProblem>::outputs(const BoundArgs& args) const {
  const GdnProblem p = GdnProblem::from(args);
  return {{"out", TensorSpec{p.dtype, {p.T, p.n_v * p.d_v}}},
          {"updated_conv_state", args.tensor("conv_state")},
          {"updated_recurrent_state", args.tensor("recurrent_state")}};
}

template <>
double ProblemOp<GdnProblem>::flops(const BoundArgs& args) const {
  // Per valid token: the conv (2 W C), and per value head the decay (d_k d_v), k^T S, the
  // rank-1 update and q^T S (2 d_k d_v each).
  const GdnProblem p = GdnProblem::from(args);
  const double tokens = static_cast<double>(p.query_start_loc[p.active()] - p.query_start_loc[0]);
  return tokens * (2.0 * p.W * p.C + 7.0 * p.n_v * p.d_k * p.d_v);
}

template <>
double ProblemOp<GdnProblem>::bytes(const BoundArgs& args) const {
  // The inputs and outputs once, the states only for the requests' slots (the state tensors'
  // other slots are copied through, which an in-place state would not need).
  const GdnProblem p = GdnProblem::from(args);
  double total = 0.0;
  for (const char* name : {"qkv", "b", "a", "conv_weight", "conv_bias", "a_log", "dt_bias"}) {
    if (args.has(name)) total += static_cast<double>(args.tensor(name).size_bytes());
  }
  total += static_cast<double>(p.T * p.n_v * p.d_v) * dtype_size(p.dtype);
  const double slot = static_cast<double>(p.n_v * p.d_k * p.d_v) * dtype_size(p.state_dtype) +
                      static_cast<double>((p.W - 1) * p.C) * dtype_size(p.dtype);
  return total + 2.0 * slot * static_cast<double>(p.R);
}

}  // namespace tokamax
