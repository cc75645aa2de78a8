// Typed implementation configs <-> JSON, strict: unknown fields and wrong types are errors.
//
// A config is a plain aggregate with default member values, a `validate()` for cross-field
// invariants and a `visit(v)` that names each field once:
//
//   struct CpuRaggedDotConfig {
//     int tile_m = 64;
//     void validate() const;
//     template <class V> void visit(V&& v) { v("tile_m", tile_m); }
//   };
//
// config_to_json / config_from_json are derived from `visit`, so a field cannot be serialized
// under one name and parsed under another.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <type_traits>

#include "ops/framework/errors.h"

namespace tokamax {

template <typename Config>
nlohmann::json config_to_json(const Config& config) {
  nlohmann::json out = nlohmann::json::object();
  const_cast<Config&>(config).visit(
      [&out](const char* name, const auto& field) { out[name] = field; });
  return out;
}

// Missing fields keep their defaults; unknown fields, wrong JSON types and failed validate()
// throw InvalidArgument naming the field.
template <typename Config>
Config config_from_json(const nlohmann::json& value) {
  if (!value.is_object())
    throw InvalidArgument("config must be a JSON object, got " + value.dump());
  Config config;
  std::set<std::string> known;
  config.visit([&](const char* name, auto& field) {
    known.insert(name);
    auto it = value.find(name);
    if (it == value.end()) return;
    using Field = std::remove_reference_t<decltype(field)>;
    const bool type_ok = std::is_same_v<Field, bool>          ? it->is_boolean()
                         : std::is_integral_v<Field>          ? it->is_number_integer()
                         : std::is_floating_point_v<Field>    ? it->is_number()
                         : std::is_same_v<Field, std::string> ? it->is_string()
                                                              : true;
    if (!type_ok) {
      throw InvalidArgument(
          "config field '" + std::string(name) + "' has the wrong type: " + it->dump(), name);
    }
    field = it->template get<Field>();
  });
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!known.count(it.key())) {
      std::string names;
      for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
      throw InvalidArgument("unknown config field '" + it.key() +
                                "' (known: " + (names.empty() ? "none" : names) + ")",
                            it.key());
    }
  }
  config.validate();
  return config;
}

// Config checks (validate() and check_config()): throw InvalidArgument naming `field` unless `ok`.
// `message` is a string or a callable returning one, so that checks that run on every config
// parse build no message unless they fail. TypedImplementation prefixes every config error with
// "<implementation> <op> config: ".
template <typename Message>
void require_config(bool ok, const char* field, Message&& message) {
  if (ok) return;
  if constexpr (std::is_invocable_v<Message>) {
    throw InvalidArgument(std::string(message()), field);
  } else {
    throw InvalidArgument(std::string(message), field);
  }
}

// `field` in [lo, hi]: "<field> is <value>; expected <lo>..<hi>" otherwise.
inline void require_range(const char* field, int64_t value, int64_t lo, int64_t hi) {
  require_config(value >= lo && value <= hi, field, [&] {
    return std::string(field) + " is " + std::to_string(value) + "; expected " +
           std::to_string(lo) + ".." + std::to_string(hi);
  });
}

// The config of implementations that have nothing to tune (e.g. the reference).
struct EmptyConfig {
  void validate() const {}
  template <class V>
  void visit(V&&) {}
};

}  // namespace tokamax
