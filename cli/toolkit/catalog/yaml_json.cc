// YAML (yaml-cpp) -> nlohmann::json conversion with the YAML 1.2 core schema.
#include "cli/toolkit/catalog/yaml_json.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cmath>
#include <limits>
#include <sstream>
#include <string_view>
#include <vector>

#include <yaml-cpp/eventhandler.h>

#include "ops/framework/errors.h"
#include "ops/framework/input_file.h"

namespace tokamax {

void yaml_fail(const std::string& source, const YAML::Node& node, const std::string& message) {
  const YamlPos pos = yaml_pos(node);
  throw InputError(source, pos.line, pos.column, message);
}

namespace {

using nlohmann::json;

// Scanners for the core schema's number forms, by hand: std::regex costs microseconds per call,
// and a catalog may hold a million scalars.
bool all_of(std::string_view text, bool (*digit)(char)) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!digit(c)) return false;
  }
  return true;
}
bool decimal_digit(char c) { return c >= '0' && c <= '9'; }
bool octal_digit(char c) { return c >= '0' && c <= '7'; }
bool hex_digit(char c) {
  return decimal_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
std::string_view without_sign(std::string_view text) {
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) text.remove_prefix(1);
  return text;
}

// Integer text per the core schema ([-+]?[0-9]+, 0o[0-7]+, 0x[0-9a-fA-F]+) -> true and `value`;
// throws std::out_of_range past int64.
bool parse_int(const std::string& text, int64_t& value) {
  const std::string_view view = text;
  int base = 10;
  std::string_view digits = view;
  if (view.starts_with("0o") && all_of(view.substr(2), octal_digit)) {
    base = 8;
    digits = view.substr(2);
  } else if (view.starts_with("0x") && all_of(view.substr(2), hex_digit)) {
    base = 16;
    digits = view.substr(2);
  } else if (!all_of(without_sign(view), decimal_digit)) {
    return false;
  }
  if (digits[0] == '+') digits.remove_prefix(1);
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value, base);
  if (ec != std::errc() || ptr != end) {
    throw std::out_of_range(text);
  }
  return true;
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool is_float_text(std::string_view text) {
  text = without_sign(text);
  size_t i = 0;
  const auto digits = [&] {
    const size_t start = i;
    while (i < text.size() && decimal_digit(text[i])) ++i;
    return i - start;
  };
  const size_t integer = digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    if (digits() == 0 && integer == 0) return false;
  } else if (integer == 0) {
    return false;
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
    if (digits() == 0) return false;
  }
  return i == text.size();
}

bool parse_float(const std::string& text, double& value) {
  const std::string_view unsigned_text = without_sign(text);
  if (unsigned_text == ".inf" || unsigned_text == ".Inf" || unsigned_text == ".INF") {
    value = text[0] == '-' ? -std::numeric_limits<double>::infinity()
                           : std::numeric_limits<double>::infinity();
    return true;
  }
  if (text == ".nan" || text == ".NaN" || text == ".NAN") {
    value = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (!is_float_text(text)) return false;
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
  } catch (const std::out_of_range&) {
    yaml_fail(source, node, "number '" + text + "' is out of range (expected a 64-bit integer)");
  }
  try {
    double real = 0.0;
    if (parse_float(text, real)) return real;
  } catch (const std::out_of_range&) {
    yaml_fail(source, node, "number '" + text + "' is out of range of a double");
  }
  return text;
}

// Events are only counted: the pass that finds where a second document starts.
class DocumentStarts : public YAML::EventHandler {
 public:
  int documents = 0;
  YAML::Mark last_start;

  void OnDocumentStart(const YAML::Mark& mark) override {
    ++documents;
    last_start = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Refuses a text that holds more than one YAML document, at the second one's start.
//
// yaml-cpp 0.7 (Debian 12's) ends a document when its top-level node ends, and starts the next one
// at the token that follows. A token that no node consumes (a ',' outside a flow collection:
// "!,", ",4]", "- a\n,") starts a document that holds a null and leaves the token where it was:
// YAML::LoadAll then makes empty documents at that token forever, allocating as it goes (every
// hang the catalog fuzzer found). Here the parser runs event by event, and stops at the second
// document, whatever starts it.
void check_single_document(const std::string& text, const std::string& source) {
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  DocumentStarts starts;
  while (parser.HandleNextDocument(starts)) {
    if (starts.documents < 2) continue;
    const YamlPos pos = yaml_pos(starts.last_start);
    const size_t offset = static_cast<size_t>(std::max(starts.last_start.pos, 0));
    const std::string_view rest = std::string_view(text).substr(std::min(offset, text.size()));
    if (rest.starts_with("---")) {
      throw InputError(source, pos.line, pos.column,
                       "expected a single YAML document, and a second one starts here");
    }
    if (rest.starts_with(",")) {
      throw InputError(source, pos.line, pos.column,
                       "YAML syntax error: ',' outside a flow collection ([a, b] or {a: b})");
    }
    size_t length = rest.empty() ? 0 : 1;  // one character, UTF-8 continuation bytes included
    while (length < rest.size() && (static_cast<unsigned char>(rest[length]) & 0xC0) == 0x80) {
      ++length;
    }
    throw InputError(source, pos.line, pos.column,
                     "YAML syntax error: '" + std::string(rest.substr(0, length)) +
                         "' after the end of the document's top-level node");
  }
}

}  // namespace

YamlPos yaml_pos(const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0) return {};
  return {mark.line + 1, mark.column + 1};
}

json YamlToJson::convert(const YAML::Node& node, int depth) {
  if (++values_ > kMaxValues) {
    yaml_fail(source_, node,
              "the document expands to more than " + std::to_string(kMaxValues) +
                  " values (aliases of aliases?)");
  }
  if (depth > kMaxDepth) {
    yaml_fail(source_, node, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return nullptr;
    case YAML::NodeType::Scalar:
      return scalar_to_json(node, source_);
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const YAML::Node& item : node) out.push_back(convert(item, depth + 1));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& pair : node) {
        const YAML::Node& key = pair.first;
        if (!key.IsScalar())
          yaml_fail(source_, key, "expected a scalar mapping key, not a list or mapping");
        const std::string& name = key.Scalar();
        if (out.contains(name)) yaml_fail(source_, key, "duplicate key '" + name + "'");
        out[name] = convert(pair.second, depth + 1);
      }
      return out;
    }
  }
  return nullptr;
}

json yaml_to_json(const YAML::Node& node, const std::string& source) {
  return YamlToJson(source)(node);
}

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  // YAML allows no C0 control character but tab, LF and CR (nor DEL): refused at their position
  // before yaml-cpp sees them (its messages for them are positionless).
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F) {
      const auto [line, column] = text_position(text, i);
      char code[8];
      std::snprintf(code, sizeof(code), "U+%04X", c);
      throw InputError(source, line, column,
                       std::string("control character ") + code + " (YAML allows none but tab)");
    }
  }
  try {
    check_single_document(text, source);
    // The first document only: LoadAll would loop on the input check_single_document refuses.
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    const YamlPos pos = yaml_pos(e.mark);
    throw InputError(source, pos.line, pos.column, "YAML syntax error: " + e.msg);
  }
}

}  // namespace tokamax
