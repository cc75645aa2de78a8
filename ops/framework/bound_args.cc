// BoundArgs accessors and canonical key.
#include "ops/framework/bound_args.h"

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

}  // namespace tokamax
