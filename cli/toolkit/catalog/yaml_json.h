// YAML (yaml-cpp) -> nlohmann::json conversion and YAML source locations for input errors.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace tokamax {

// A 1-based position in a YAML source; 0 when yaml-cpp has none (null mark).
struct YamlPos {
  int line = 0;
  int column = 0;
};
YamlPos yaml_pos(const YAML::Mark& mark);
inline YamlPos yaml_pos(const YAML::Node& node) { return yaml_pos(node.Mark()); }

// Throws InputError(source, line, column of `node`, message).
[[noreturn]] void yaml_fail(const std::string& source, const YAML::Node& node,
                            const std::string& message);

// Converts a YAML node with the YAML 1.2 core schema: plain true/false -> bool, integers
// (decimal, 0x, 0o) -> int64, floats (incl. .inf, .nan) -> double, null/~/empty -> null,
// every other scalar (and every quoted one) -> string; sequences -> arrays, mappings -> objects.
// Mapping keys must be scalars and unique. Errors throw InputError(source, line, column, ...).
nlohmann::json yaml_to_json(const YAML::Node& node, const std::string& source);

// yaml_to_json for the nodes of one document under one budget. Aliases make a small file a huge
// tree (each `*a` copies what `&a` names: ten levels of ten aliases are 10^10 values), and the
// JSON is walked recursively after; past either limit, InputError at the node.
class YamlToJson {
 public:
  static constexpr int kMaxDepth = 64;            // as kMaxJsonDepth (ops/framework/input_file.h)
  static constexpr int64_t kMaxValues = 1 << 20;  // per document; our catalogs have thousands

  explicit YamlToJson(const std::string& source) : source_(source) {}
  nlohmann::json operator()(const YAML::Node& node) { return convert(node, 0); }

 private:
  nlohmann::json convert(const YAML::Node& node, int depth);

  const std::string& source_;
  int64_t values_ = 0;
};

// Parses `text` as exactly one YAML document. Syntax errors throw InputError at their position;
// an empty text yields a null node.
YAML::Node parse_yaml(const std::string& text, const std::string& source);

}  // namespace tokamax
