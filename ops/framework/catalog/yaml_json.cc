// YAML (yaml-cpp) -> nlohmann::json conversion with the YAML 1.2 core schema.
#include "ops/framework/catalog/yaml_json.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <regex>
#include <vector>

#include "ops/framework/errors.h"

namespace tokamax {

void yaml_fail(const std::string& source, const YAML::Node& node, const std::string& message) {
  const YamlPos pos = yaml_pos(node);
  throw InputError(source, pos.line, pos.column, message);
}

namespace {

using nlohmann::json;

// Integer text per the core schema -> true and `value`; throws std::out_of_range past int64.
bool parse_int(const std::string& text, int64_t& value) {
  static const std::regex decimal("[-+]?[0-9]+"), octal("0o[0-7]+"), hex("0x[0-9a-fA-F]+");
  int base = 10;
  std::string digits = text;
  if (std::regex_match(text, octal)) {
    base = 8;
    digits = text.substr(2);
  } else if (std::regex_match(text, hex)) {
    base = 16;
    digits = text.substr(2);
  } else if (!std::regex_match(text, decimal)) {
    return false;
  }
  if (!digits.empty() && digits[0] == '+') digits = digits.substr(1);
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value, base);
  if (ec != std::errc() || ptr != end) {
    throw std::out_of_range(text);
  }
  return true;
}

bool parse_float(const std::string& text, double& value) {
  static const std::regex number("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  static const std::regex inf("[-+]?\\.(inf|Inf|INF)"), nan("\\.(nan|NaN|NAN)");
  if (std::regex_match(text, inf)) {
    value = text[0] == '-' ? -std::numeric_limits<double>::infinity()
                           : std::numeric_limits<double>::infinity();
    return true;
  }
  if (std::regex_match(text, nan)) {
    value = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (!std::regex_match(text, number)) return false;
  value = std::stod(text);
  return true;
}

json scalar_to_json(const YAML::Node& node, const std::string& source) {
  const std::string& text = node.Scalar();
  const std::string& tag = node.Tag();
  // "!" marks quoted and block scalars: always strings, as is an explicit !!str.
  if (tag == "!" || tag == "tag:yaml.org,2002:str") return text;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  if (text == "null" || text == "Null" || text == "NULL" || text == "~" || text.empty()) {
    return nullptr;
  }
  try {
    int64_t integer = 0;
    if (parse_int(text, integer)) return integer;
    double real = 0.0;
    if (parse_float(text, real)) return real;
  } catch (const std::out_of_range&) {
    yaml_fail(source, node, "number '" + text + "' is out of range (expected a 64-bit integer)");
  }
  return text;
}

}  // namespace

YamlPos yaml_pos(const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0) return {};
  return {mark.line + 1, mark.column + 1};
}

json yaml_to_json(const YAML::Node& node, const std::string& source) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return nullptr;
    case YAML::NodeType::Scalar:
      return scalar_to_json(node, source);
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const YAML::Node& item : node) out.push_back(yaml_to_json(item, source));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& pair : node) {
        const YAML::Node& key = pair.first;
        if (!key.IsScalar())
          yaml_fail(source, key, "expected a scalar mapping key, not a list or mapping");
        const std::string& name = key.Scalar();
        if (out.contains(name)) yaml_fail(source, key, "duplicate key '" + name + "'");
        out[name] = yaml_to_json(pair.second, source);
      }
      return out;
    }
  }
  return nullptr;
}

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    const YamlPos pos = yaml_pos(e.mark);
    throw InputError(source, pos.line, pos.column, "YAML syntax error: " + e.msg);
  }
  if (documents.empty()) return YAML::Node();
  if (documents.size() > 1) {
    yaml_fail(source, documents[1],
              "expected a single YAML document, found " + std::to_string(documents.size()));
  }
  return documents[0];
}

}  // namespace tokamax
