// BoundArgs: the canonical, validated arguments of one op call; its canonical JSON is the cache
// key.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "ops/framework/tensor.h"

namespace tokamax {

// Tensors are stored as their spec strings ("bf16[8,4096]"), options as JSON values with every
// default filled in. nlohmann::json objects keep keys sorted, so dump() is canonical.
struct BoundArgs {
  std::string op;
  nlohmann::json args = nlohmann::json::object();

  // {"op": ..., "args": {...}} as compact JSON with sorted keys: the autotuning-cache key.
  std::string key() const;
  nlohmann::json to_json() const { return {{"op", op}, {"args", args}}; }
  static BoundArgs from_json(const nlohmann::json& value);

  TensorSpec tensor(std::string_view name) const;
  const nlohmann::json& option(std::string_view name) const;
  bool has(std::string_view name) const { return args.contains(name); }
};

// Another spelling of an argument (upstream's public API names some differently from its ops'
// bind): `alias` is read as `name`.
struct ArgAlias {
  const char* alias;
  const char* name;
};

// `args` with every alias renamed to its argument's name. InvalidArgument naming the alias when
// both spellings are given. `prefix` starts the message ("dot_product_attention: ").
nlohmann::json resolve_arg_aliases(const nlohmann::json& args, const std::vector<ArgAlias>& aliases,
                                   std::string_view prefix);

// What a tensor argument given to an op's bind must be (read_tensor_arg).
struct TensorArgRule {
  // Its shape in the op's notation, "[M, K]", and a spec of the kind expected, "bf16[4096,7168]"
  // (both for the messages).
  std::string_view shape = {};
  std::string_view example = {};
  int rank = -1;  // the rank it must have; -1: any rank >= min_rank
  int min_rank = 0;
  bool float_only = true;                // a floating-point dtype
  bool quantized_ok = false;             // with float_only: also i8 and f8e4m3
  std::string_view quantized_note = {};  // with quantized_ok: how, in the dtype message
};

// Tensor argument `name` of `args`: present, a spec string that parses ("bf16[8,128]"), of the
// rule's rank and dtype. Anything else throws InvalidArgument naming the argument, its message
// starting with `prefix` ("ragged_dot: ").
TensorSpec read_tensor_arg(std::string_view prefix, const nlohmann::json& args,
                           const std::string& name, const TensorArgRule& rule);

// Integer argument `name` of `args`: present, an integer, within [min, max]. Anything else throws
// InvalidArgument naming the argument, its message starting with `prefix` ("top_k: ") and saying
// the range as `range` ("[1, n = 64]").
int64_t read_int_arg(std::string_view prefix, const nlohmann::json& args, const std::string& name,
                     int64_t min, int64_t max, std::string_view range);

// Integer-list argument `name` of `args` (metadata given as values, ragged_paged_attention's
// cu_q_lens): present, a list of integers; `shape` names its extent in the message ("[S + 1]").
// Anything else throws InvalidArgument naming the argument.
std::vector<int64_t> read_int_list_arg(std::string_view prefix, const nlohmann::json& args,
                                       const std::string& name, std::string_view shape);

// Boolean argument `name` of `args`: `fallback` when absent or null, else it must be true or
// false (InvalidArgument naming it otherwise).
bool read_bool_arg(std::string_view prefix, const nlohmann::json& args, const std::string& name,
                   bool fallback = false);

// `args` is a mapping whose keys are all in `known`: otherwise InvalidArgument, naming the first
// unknown key and listing `known` ("ragged_gather: unknown argument 'idx' (expected x, ...)").
void check_arg_names(std::string_view prefix, const nlohmann::json& args,
                     std::initializer_list<std::string_view> known);

}  // namespace tokamax
