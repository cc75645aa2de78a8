// BoundArgs accessors and canonical key.
#include "ops/framework/bound_args.h"

#include <algorithm>

#include "ops/framework/errors.h"

namespace tokamax {

std::string BoundArgs::key() const { return to_json().dump(); }

BoundArgs BoundArgs::from_json(const nlohmann::json& value) {
  if (!value.is_object() || !value.contains("op") || !value["op"].is_string() ||
      !value.contains("args") || !value["args"].is_object()) {
    throw InvalidArgument("bound args must be an object {\"op\": string, \"args\": object}");
  }
  return BoundArgs{value["op"].get<std::string>(), value["args"]};
}

TensorSpec BoundArgs::tensor(std::string_view name) const {
  const nlohmann::json& value = option(name);
  if (!value.is_string()) {
    throw InvalidArgument(op + ": argument '" + std::string(name) + "' is not a tensor spec",
                          std::string(name));
  }
  return parse_tensor_spec(value.get<std::string>());
}

const nlohmann::json& BoundArgs::option(std::string_view name) const {
  auto it = args.find(name);
  if (it == args.end()) {
    throw InvalidArgument(op + ": missing argument '" + std::string(name) + "'", std::string(name));
  }
  return *it;
}

nlohmann::json resolve_arg_aliases(const nlohmann::json& args, const std::vector<ArgAlias>& aliases,
                                   std::string_view prefix) {
  nlohmann::json resolved = args;
  for (const ArgAlias& a : aliases) {
    if (!resolved.contains(a.alias)) continue;
    if (resolved.contains(a.name)) {
      throw InvalidArgument(std::string(prefix) + a.alias + " is another name for " + a.name +
                                "; give one of them, not both",
                            a.alias);
    }
    resolved[a.name] = resolved[a.alias];
    resolved.erase(a.alias);
  }
  return resolved;
}

TensorSpec read_tensor_arg(std::string_view prefix, const nlohmann::json& args,
                           const std::string& name, const TensorArgRule& rule) {
  const std::string op(prefix);
  if (!args.contains(name)) {
    throw InvalidArgument(op + "missing argument '" + name + "' (" + std::string(rule.shape) + ")",
                          name);
  }
  const nlohmann::json& value = args.at(name);
  if (!value.is_string()) {
    throw InvalidArgument(op + name + " must be a tensor spec like " + std::string(rule.example) +
                              ", got " + value.dump(),
                          name);
  }
  TensorSpec spec;
  try {
    spec = parse_tensor_spec(value.get<std::string>());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(op + name + ": " + e.what(), name);
  }
  const bool rank_ok = rule.rank >= 0 ? spec.rank() == rule.rank : spec.rank() >= rule.min_rank;
  if (!rank_ok) {
    const std::string wanted =
        rule.rank >= 0 ? std::to_string(rule.rank) : ">= " + std::to_string(rule.min_rank);
    throw InvalidArgument(op + name + " must have rank " + wanted + " " + std::string(rule.shape) +
                              ", got " + spec.to_string(),
                          name);
  }
  const bool dtype_ok = !rule.float_only || is_floating(spec.dtype) ||
                        (rule.quantized_ok && is_quantized(spec.dtype));
  if (!dtype_ok) {
    throw InvalidArgument(op + name + " must be a float tensor" +
                              (rule.quantized_ok ? std::string(rule.quantized_note) : "") +
                              ", got " + spec.to_string(),
                          name);
  }
  return spec;
}

int64_t read_int_arg(std::string_view prefix, const nlohmann::json& args, const std::string& name,
                     int64_t min, int64_t max, std::string_view range) {
  const std::string op(prefix);
  if (!args.contains(name)) {
    throw InvalidArgument(
        op + "missing argument '" + name + "' (an integer in " + std::string(range) + ")", name);
  }
  const nlohmann::json& value = args.at(name);
  if (!value.is_number_integer() || value.get<int64_t>() < min || value.get<int64_t>() > max) {
    throw InvalidArgument(
        op + name + " must be an integer in " + std::string(range) + ", got " + value.dump(), name);
  }
  return value.get<int64_t>();
}

std::vector<int64_t> read_int_list_arg(std::string_view prefix, const nlohmann::json& args,
                                       const std::string& name, std::string_view shape) {
  const std::string op(prefix);
  if (!args.contains(name) || !args.at(name).is_array()) {
    throw InvalidArgument(
        op + name + " must be a list of ints " + std::string(shape) + " (the metadata's values)",
        name);
  }
  std::vector<int64_t> values;
  for (const nlohmann::json& v : args.at(name)) {
    if (!v.is_number_integer()) {
      throw InvalidArgument(op + name + " must hold ints, got " + v.dump(), name);
    }
    values.push_back(v.get<int64_t>());
  }
  return values;
}

bool read_bool_arg(std::string_view prefix, const nlohmann::json& args, const std::string& name,
                   bool fallback) {
  if (!args.contains(name) || args.at(name).is_null()) return fallback;
  const nlohmann::json& value = args.at(name);
  if (!value.is_boolean()) {
    throw InvalidArgument(
        std::string(prefix) + name + " must be true or false, got " + value.dump(), name);
  }
  return value.get<bool>();
}

void check_arg_names(std::string_view prefix, const nlohmann::json& args,
                     std::initializer_list<std::string_view> known) {
  if (!args.is_object()) throw InvalidArgument(std::string(prefix) + "args must be a mapping");
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) != known.end()) continue;
    std::string list;
    for (std::string_view name : known) list += (list.empty() ? "" : ", ") + std::string(name);
    throw InvalidArgument(
        std::string(prefix) + "unknown argument '" + it.key() + "' (expected " + list + ")",
        it.key());
  }
}

}  // namespace tokamax
