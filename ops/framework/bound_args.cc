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

}  // namespace tokamax
