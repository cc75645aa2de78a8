// Reads `tune --from` files: recorded calls (JSON lines) and verify / bench JSON documents.
#include "cli/tune_sources.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "ops/framework/errors.h"
#include "ops/framework/input_file.h"
#include "ops/framework/random.h"
#include "ops/registry.h"

namespace tokamax {
namespace {

using nlohmann::json;

// The op's tensors (string-valued args) and a hash of the key: readable and unique.
std::string derived_name(const BoundArgs& args) {
  std::string name;
  for (const auto& [field, value] : args.args.items()) {
    if (value.is_string() && value.get<std::string>().find('[') != std::string::npos) {
      name += (name.empty() ? "" : " ") + value.get<std::string>();
    }
  }
  char hash[16];
  std::snprintf(hash, sizeof(hash), "#%06llx",
                static_cast<unsigned long long>(stream_id(args.key()) & 0xFFFFFF));
  return name + (name.empty() ? "" : " ") + hash;
}

// One entry {"op", "args"[, "spec"]} -> a bound case. `where` prefixes messages.
ArgSpec bind_entry(const json& entry, const std::string& source, int line,
                   const std::string& where) {
  auto fail = [&](const std::string& message) -> InputError {
    return InputError(source, line, 0, where + message);
  };
  if (!entry.is_object()) throw fail("expected an object with \"op\" and \"args\"");
  const auto op_name = entry.find("op");
  const auto args = entry.find("args");
  if (op_name == entry.end() || !op_name->is_string()) throw fail("missing string field \"op\"");
  if (args == entry.end() || !args->is_object()) throw fail("missing object field \"args\"");
  ArgSpec spec;
  try {
    spec.args = find_op(op_name->get<std::string>()).bind(*args);
  } catch (const std::exception& e) {  // unknown op, invalid args, wrong JSON types
    throw fail(e.what());
  }
  spec.op = spec.args.op;
  const auto name = entry.find("spec");
  spec.name = name != entry.end() && name->is_string() && !name->get<std::string>().empty()
                  ? name->get<std::string>()
                  : derived_name(spec.args);
  spec.source = source;
  spec.line = line;
  return spec;
}

std::vector<ArgSpec> parse_document(const json& document, const std::string& source) {
  const json* cases = nullptr;
  std::string path = "cases";
  if (document.contains("cases") && document["cases"].is_array()) {
    cases = &document["cases"];  // verify --json
  } else if (document.contains("tokamax") && document["tokamax"].is_object() &&
             document["tokamax"].contains("cases") && document["tokamax"]["cases"].is_array()) {
    cases = &document["tokamax"]["cases"];  // bench --json
    path = "tokamax.cases";
  } else {
    throw InputError(source, 0, 0,
                     "not a recorded-calls file (JSON lines with op and args), nor a verify or "
                     "bench --json document (cases[] or tokamax.cases[])");
  }
  std::vector<ArgSpec> out;
  for (size_t i = 0; i < cases->size(); ++i) {
    out.push_back(bind_entry((*cases)[i], source, 0, path + "[" + std::to_string(i) + "]: "));
  }
  return out;
}

std::vector<ArgSpec> parse_lines(std::string_view text, const std::string& source) {
  std::vector<ArgSpec> out;
  std::istringstream lines{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json entry = parse_json_input(line, source, number);
    out.push_back(bind_entry(entry, source, number, ""));
  }
  return out;
}

}  // namespace

std::vector<ArgSpec> parse_tune_source(std::string_view text, const std::string& source_name) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    throw InputError(source_name, 0, 0, "empty file: no cases to tune");
  }
  check_json_depth(text, source_name);
  std::vector<ArgSpec> cases;
  try {
    const json document = json::parse(text);
    // A single record (one line, perhaps after blank ones) is a JSON-lines file.
    cases = document.is_object() && document.contains("op") ? parse_lines(text, source_name)
                                                            : parse_document(document, source_name);
  } catch (const json::parse_error& whole) {
    // Not one JSON value: JSON lines, unless the first line is not JSON on its own either (a
    // broken document), where the document's own error position is the useful one.
    const std::string_view rest = text.substr(text.find_first_not_of(" \t\r\n"));
    const std::string_view first = rest.substr(0, rest.find('\n'));
    if (!json::accept(first)) {
      const auto [line, column] = text_position(text, whole.byte == 0 ? 0 : whole.byte - 1);
      throw InputError(source_name, line, column, std::string("not valid JSON: ") + whole.what());
    }
    cases = parse_lines(text, source_name);
  } catch (const json::exception& e) {  // a number past double's range
    throw InputError(source_name, 0, 0, std::string("not valid JSON: ") + e.what());
  }
  if (cases.empty()) throw InputError(source_name, 0, 0, "no cases to tune");
  return cases;
}

std::vector<ArgSpec> load_tune_sources(const std::vector<std::string>& paths) {
  std::vector<ArgSpec> all;
  for (const std::string& path : paths) {
    std::vector<ArgSpec> cases =
        parse_tune_source(read_input_file(path, kMaxJsonInputBytes, "tune source"), path);
    all.insert(all.end(), cases.begin(), cases.end());
  }
  return dedup_cases(all);
}

std::vector<ArgSpec> dedup_cases(const std::vector<ArgSpec>& cases) {
  std::set<std::string> seen;  // BoundArgs::key() holds the op
  std::vector<ArgSpec> out;
  for (const ArgSpec& spec : cases) {
    if (seen.insert(spec.args.key()).second) out.push_back(spec);
  }
  return out;
}

}  // namespace tokamax
