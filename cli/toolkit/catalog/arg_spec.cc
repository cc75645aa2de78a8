// ArgSpec catalogs: YAML parsing with exact error locations, embedded and user catalog loading.
#include "cli/toolkit/catalog/arg_spec.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "backends/files.h"
#include "ops/framework/embedded.h"
#include "ops/framework/errors.h"
#include "ops/framework/input_file.h"
#include "ops/registry.h"
#include "cli/toolkit/catalog/yaml_json.h"

namespace tokamax {
namespace {

using nlohmann::json;

// One `key: value` of a mapping, both nodes kept for error locations.
struct Entry {
  YAML::Node key;
  YAML::Node value;
  // Errors about the value point at it, or at the key when the value is empty (`tags:`), whose
  // own mark is wherever the parser went next.
  const YAML::Node& where() const { return value.IsNull() ? key : value; }
};
using Entries = std::map<std::string, Entry>;

std::string join(const std::vector<std::string>& items, const std::string& separator = ", ") {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

[[noreturn]] void fail_key(const std::string& source, const YAML::Node& key, const char* problem,
                           const std::string& what, const std::vector<std::string>& known) {
  const std::string name = key.IsScalar() ? key.Scalar() : "";
  yaml_fail(
      source, key,
      std::string(problem) + " key '" + name + "' in " + what + " (expected " + join(known) + ")");
}

// The entries of a mapping whose keys must all be in `known`.
Entries read_mapping(const YAML::Node& map, const std::vector<std::string>& known,
                     const std::string& what, const std::string& source) {
  Entries entries;
  for (const auto& pair : map) {
    const YAML::Node& key = pair.first;
    const std::string name = key.IsScalar() ? key.Scalar() : "";
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      fail_key(source, key, "unknown", what, known);
    }
    if (entries.count(name)) fail_key(source, key, "duplicate", what, known);
    entries.emplace(name, Entry{key, pair.second});
  }
  return entries;
}

std::string read_string(const Entry& entry, const std::string& what, const std::string& source) {
  const json value = entry.value.IsScalar() ? yaml_to_json(entry.value, source) : json();
  if (!value.is_string()) {
    yaml_fail(source, entry.where(), "expected " + what + ", got " + value.dump());
  }
  return value.get<std::string>();
}

// Names and tags are matched by shell globs and shown in tables: keep them to a safe alphabet.
void check_identifier(const std::string& text, const YAML::Node& node, const std::string& what,
                      const std::string& source) {
  // Spec names also name folders (verify --dump-dir DIR/<op>/<spec>/).
  static const std::regex identifier("[A-Za-z0-9_.+-]+");
  if (!std::regex_match(text, identifier) || !is_safe_file_name(text)) {
    yaml_fail(source, node,
              what + " '" + text.substr(0, 128) +
                  "' must be non-empty, at most 128 characters, not . or .., and use only "
                  "letters, digits and _ . + -");
  }
}

std::vector<std::string> read_tags(const Entry& entry, const std::string& source) {
  std::vector<std::string> tags;
  if (entry.value.IsNull()) return tags;
  if (!entry.value.IsSequence()) {
    yaml_fail(source, entry.value, "expected tags as a list of strings, e.g. [primary, ci_tests]");
  }
  for (const YAML::Node& item : entry.value) {
    const json tag = item.IsScalar() ? yaml_to_json(item, source) : json();
    if (!tag.is_string()) {
      yaml_fail(source, item, "expected each tag to be a string, got " + tag.dump());
    }
    check_identifier(tag.get<std::string>(), item, "tag", source);
    tags.push_back(tag.get<std::string>());
  }
  return tags;
}

// The node an InvalidArgument's field names: "group_sizes" or "group_sizes.total" under `args`.
YAML::Node locate_field(const YAML::Node& args, const std::string& field) {
  // reset(), never operator=: assigning to a YAML::Node overwrites the node it refers to.
  YAML::Node where;
  where.reset(args);
  YAML::Node map;
  map.reset(args);
  std::stringstream parts(field);
  std::string part;
  while (std::getline(parts, part, '.') && map.IsMap()) {
    part = part.substr(0, part.find('['));
    YAML::Node key, value;
    bool found = false;
    for (const auto& pair : map) {
      if (pair.first.IsScalar() && pair.first.Scalar() == part) {
        key.reset(pair.first);
        value.reset(pair.second);
        found = true;
      }
    }
    if (!found) break;
    where.reset(key);
    map.reset(value);
  }
  return where;
}

BoundArgs bind_args(const Op& op, const Entry& entry, const std::string& source,
                    YamlToJson& to_json) {
  if (!entry.value.IsMap()) {
    yaml_fail(source, entry.where(),
              "expected args as a mapping of argument names to values (e.g. lhs: bf16[4096,7168])");
  }
  const json args = to_json(entry.value);
  try {
    return op.bind(args);
  } catch (const InvalidArgument& e) {
    yaml_fail(source, locate_field(entry.value, e.field()), e.what());
  } catch (const json::exception& e) {
    yaml_fail(source, entry.value, std::string(op.name()) + ": invalid args: " + e.what());
  }
}

ArgSpec parse_spec(const Op& op, const YAML::Node& item, const std::string& source,
                   YamlToJson& to_json) {
  if (!item.IsMap()) {
    yaml_fail(source, item,
              "expected each spec to be a mapping with keys name, tags, project, args");
  }
  const Entries fields = read_mapping(item, {"name", "tags", "project", "args"}, "spec", source);
  ArgSpec spec;
  spec.op = std::string(op.name());
  spec.source = source;
  const auto name = fields.find("name");
  if (name == fields.end()) yaml_fail(source, item, "spec is missing 'name' (a unique identifier)");
  spec.name = read_string(name->second, "the spec name as a string", source);
  check_identifier(spec.name, name->second.where(), "spec name", source);
  spec.line = yaml_pos(name->second.where()).line;
  if (const auto tags = fields.find("tags"); tags != fields.end()) {
    spec.tags = read_tags(tags->second, source);
  }
  if (const auto project = fields.find("project"); project != fields.end()) {
    if (!project->second.value.IsNull()) {
      spec.project = read_string(project->second, "project as a string", source);
    }
  }
  const auto args = fields.find("args");
  if (args == fields.end()) {
    yaml_fail(source, item, "spec '" + spec.name + "' is missing 'args' (the op's arguments)");
  }
  spec.args = bind_args(op, args->second, source, to_json);
  return spec;
}

}  // namespace

std::vector<ArgSpec> parse_catalog(std::string_view text, const std::string& source_name) {
  const std::string& source = source_name;
  const YAML::Node root = parse_yaml(std::string(text), source);
  if (!root.IsMap()) {
    yaml_fail(source, root,
              std::string(root.IsNull() ? "empty catalog" : "not a catalog") +
                  ": expected a mapping with keys 'op' and 'specs'");
  }
  const Entries fields = read_mapping(root, {"op", "specs"}, "catalog", source);
  const auto op_entry = fields.find("op");
  if (op_entry == fields.end())
    yaml_fail(source, root, "catalog is missing 'op' (e.g. op: ragged_dot)");
  const std::string op_name = read_string(op_entry->second, "the op name as a string", source);
  const Op* op = nullptr;
  try {
    op = &find_op(op_name);
  } catch (const InvalidArgument& e) {
    yaml_fail(source, op_entry->second.where(), e.what());
  }
  const auto specs_entry = fields.find("specs");
  if (specs_entry == fields.end()) {
    yaml_fail(source, root, "catalog is missing 'specs' (a list of specs)");
  }
  const YAML::Node& items = specs_entry->second.value;
  if (!items.IsSequence()) {
    yaml_fail(source, specs_entry->second.where(), "expected 'specs' to be a list of specs");
  }
  std::vector<ArgSpec> specs;
  std::map<std::string, int> first_line;
  YamlToJson to_json(source);  // one budget for the whole catalog
  for (const YAML::Node& item : items) {
    ArgSpec spec = parse_spec(*op, item, source, to_json);
    if (const auto seen = first_line.find(spec.name); seen != first_line.end()) {
      const YamlPos pos = yaml_pos(item["name"]);
      throw InputError(source, pos.line, pos.column,
                       "duplicate spec name '" + spec.name + "' (first defined at line " +
                           std::to_string(seen->second) + ")");
    }
    first_line.emplace(spec.name, spec.line);
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::vector<ArgSpec> load_catalog_file(const std::string& path) {
  return parse_catalog(read_input_file(path, kMaxCatalogBytes, "catalog"), path);
}

std::vector<ArgSpec> builtin_specs() {
  static const std::vector<ArgSpec> specs = [] {
    std::vector<ArgSpec> all;
    for (const EmbeddedFile& file : embedded_files("specs/")) {
      std::vector<ArgSpec> specs =
          parse_catalog(file.content, std::string(file.path) + " (embedded)");
      all.insert(all.end(), specs.begin(), specs.end());
    }
    return all;
  }();
  return specs;
}

std::vector<ArgSpec> load_specs(const std::vector<std::string>& user_files) {
  std::vector<ArgSpec> all = builtin_specs();
  for (const std::string& path : user_files) {
    std::vector<ArgSpec> specs = load_catalog_file(path);
    all.insert(all.end(), specs.begin(), specs.end());
  }
  std::map<std::pair<std::string, std::string>, const ArgSpec*> seen;
  for (const ArgSpec& spec : all) {
    const auto [it, inserted] = seen.emplace(std::pair(spec.op, spec.name), &spec);
    if (!inserted) {
      const ArgSpec& first = *it->second;
      throw InputError(spec.source, spec.line, 0,
                       "spec '" + spec.name + "' of op " + spec.op + " is already defined at " +
                           first.source + ":" + std::to_string(first.line) +
                           " (spec names must be unique per op)");
    }
  }
  return all;
}

}  // namespace tokamax
