// The autotuning cache in memory: entry JSON, the versioned file schema, merge and filter.
#include "ops/framework/autotune_cache.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "ops/framework/errors.h"
#include "ops/framework/input_file.h"

namespace tokamax {
namespace {

using nlohmann::json;

// The oldest format_version parse() still reads (upgrading it to kFormatVersion).
constexpr int kOldestFormatVersion = 1;

[[noreturn]] void bad_field(const std::string& field, const std::string& expectation,
                            const json& value) {
  throw InvalidArgument(field + ": " + expectation + ", got " + value.type_name(), field);
}

// A schema error: no line/column, the JSON path says where.
[[noreturn]] void schema_error(const std::string& source, const std::string& path,
                               const std::string& message) {
  throw InputError(source, 0, 0, path + ": " + message);
}

void expect_object(const json& value, const std::string& path, const std::string& source) {
  if (!value.is_object()) {
    schema_error(source, path, std::string("expected an object, got ") + value.type_name());
  }
}

// `["key"]` with the key JSON-escaped, so a path names args keys (themselves JSON) unambiguously.
std::string path_key(const std::string& key) { return "[" + json(key).dump() + "]"; }

// Brings a document of an older format version up to kFormatVersion, one version at a time, so
// that the schema walk below only knows the current layout. Version 1 is the first format; when
// version 2 arrives, bump kFormatVersion and add `case 1: upgrade_v1_to_v2(document); break;`.
void upgrade_to_current(json& document, int version, const std::string& source) {
  for (; version < AutotuneCache::kFormatVersion; ++version) {
    switch (version) {
      default:
        schema_error(source, "format_version",
                     "no upgrade from version " + std::to_string(version));
    }
  }
  document["format_version"] = AutotuneCache::kFormatVersion;
}

// Checks format_version and upgrades older documents in place.
void check_version(json& document, const std::string& source) {
  if (!document.contains("format_version")) {
    schema_error(source, "format_version",
                 "missing (expected " + std::to_string(AutotuneCache::kFormatVersion) + ")");
  }
  const json& version_json = document["format_version"];
  if (!version_json.is_number_integer()) {
    schema_error(source, "format_version",
                 std::string("expected an integer, got ") + version_json.type_name());
  }
  const bool too_new = version_json.is_number_unsigned()
                           ? version_json.get<std::uint64_t>() > AutotuneCache::kFormatVersion
                           : version_json.get<std::int64_t>() > AutotuneCache::kFormatVersion;
  if (too_new) {
    schema_error(source, "format_version",
                 version_json.dump() + " is newer than this build reads (" +
                     std::to_string(AutotuneCache::kFormatVersion) + "); update tokamax");
  }
  const std::int64_t version = version_json.get<std::int64_t>();
  if (version < kOldestFormatVersion) {
    schema_error(source, "format_version", version_json.dump() + " is not a known cache format");
  }
  upgrade_to_current(document, static_cast<int>(version), source);
}

// Walks entries -> device -> op -> args -> impl -> entry, naming the JSON path of any error.
void read_entries(const json& entries, const std::string& source, AutotuneCache& cache) {
  expect_object(entries, "entries", source);
  for (const auto& [device, ops] : entries.items()) {
    const std::string device_path = "entries" + path_key(device);
    expect_object(ops, device_path, source);
    for (const auto& [op, by_args] : ops.items()) {
      const std::string op_path = device_path + path_key(op);
      expect_object(by_args, op_path, source);
      for (const auto& [args, by_impl] : by_args.items()) {
        const std::string args_path = op_path + path_key(args);
        expect_object(by_impl, args_path, source);
        for (const auto& [impl, value] : by_impl.items()) {
          const std::string entry_path = args_path + path_key(impl);
          try {
            cache.put({device, op, args, impl}, CacheEntry::from_json(value));
          } catch (const InvalidArgument& e) {
            if (e.field().empty()) schema_error(source, entry_path, e.what());
            throw InputError(source, 0, 0, entry_path + "." + e.what());
          }
        }
      }
    }
  }
}

std::string timestamp_of(const CacheEntry& entry) {
  const auto it = entry.metadata.find("timestamp");
  return it != entry.metadata.end() && it->is_string() ? it->get<std::string>() : "";
}

// Whether `a` should replace `b`: a verified entry first, then the faster one, then the newer one
// (ISO-8601 timestamps order lexicographically).
bool preferred(const CacheEntry& a, const CacheEntry& b) {
  if (a.verified != b.verified) return a.verified;
  if (a.time_s != b.time_s) return a.time_s < b.time_s;
  return timestamp_of(a) > timestamp_of(b);
}

}  // namespace

nlohmann::json CacheEntry::to_json() const {
  return {{"config", config},     {"time_s", time_s},         {"samples", samples},
          {"verified", verified}, {"candidates", candidates}, {"metadata", metadata}};
}

CacheEntry CacheEntry::from_json(const nlohmann::json& value) {
  if (!value.is_object()) {
    throw InvalidArgument(std::string("expected an object, got ") + value.type_name());
  }
  CacheEntry entry;
  for (const auto& [field, item] : value.items()) {
    if (field == "config") {
      if (!item.is_object()) bad_field(field, "expected an object", item);
      entry.config = item;
    } else if (field == "time_s") {
      if (!item.is_number()) bad_field(field, "expected a number", item);
      entry.time_s = item.get<double>();
      if (!(entry.time_s >= 0)) throw InvalidArgument("time_s: must not be negative", field);
    } else if (field == "samples") {
      if (!item.is_array()) bad_field(field, "expected an array of numbers", item);
      for (size_t i = 0; i < item.size(); ++i) {
        if (!item[i].is_number()) {
          bad_field("samples[" + std::to_string(i) + "]", "expected a number", item[i]);
        }
        entry.samples.push_back(item[i].get<double>());
      }
    } else if (field == "verified") {
      if (!item.is_boolean()) bad_field(field, "expected true or false", item);
      entry.verified = item.get<bool>();
    } else if (field == "candidates") {
      if (!item.is_array()) bad_field(field, "expected an array", item);
      entry.candidates = item;
    } else if (field == "metadata") {
      if (!item.is_object()) bad_field(field, "expected an object", item);
      entry.metadata = item;
    } else {
      throw InvalidArgument(field +
                                ": unknown field (known: config, time_s, samples, verified, "
                                "candidates, metadata)",
                            field);
    }
  }
  for (const char* required : {"config", "time_s"}) {
    if (!value.contains(required)) {
      throw InvalidArgument(std::string(required) + ": missing", required);
    }
  }
  return entry;
}

AutotuneCache AutotuneCache::parse(std::string_view text, const std::string& source_name) {
  json document = parse_json_input(text, source_name);
  if (!document.is_object()) {
    throw InputError(source_name, 0, 0,
                     std::string("expected an object with format_version and entries, got ") +
                         document.type_name());
  }
  check_version(document, source_name);
  for (const auto& [field, value] : document.items()) {
    if (field != "format_version" && field != "entries") {
      schema_error(source_name, field, "unknown field (known: format_version, entries)");
    }
  }
  if (!document.contains("entries")) schema_error(source_name, "entries", "missing");
  AutotuneCache cache;
  read_entries(document["entries"], source_name, cache);
  return cache;
}

const CacheEntry* AutotuneCache::find(const CacheKey& key) const {
  const auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

void AutotuneCache::put(const CacheKey& key, CacheEntry entry) {
  entries_.insert_or_assign(key, std::move(entry));
}

std::vector<MergeConflict> AutotuneCache::merge(const AutotuneCache& other) {
  std::vector<MergeConflict> conflicts;
  for (const auto& [key, incoming] : other.entries_) {
    const auto [it, inserted] = entries_.try_emplace(key, incoming);
    if (inserted) continue;
    CacheEntry& current = it->second;
    const bool replace = preferred(incoming, current);
    if (current.config != incoming.config) {
      const CacheEntry& kept = replace ? incoming : current;
      const CacheEntry& dropped = replace ? current : incoming;
      conflicts.push_back({key, kept.config, kept.time_s, dropped.config, dropped.time_s});
    }
    if (replace) current = incoming;
  }
  return conflicts;
}

AutotuneCache AutotuneCache::filtered(const std::vector<std::string>& devices,
                                      const std::vector<std::string>& ops) const {
  const auto matches = [](const std::vector<std::string>& wanted, const std::string& value) {
    return wanted.empty() || std::find(wanted.begin(), wanted.end(), value) != wanted.end();
  };
  AutotuneCache result;
  for (const auto& [key, entry] : entries_) {
    if (matches(devices, key.device) && matches(ops, key.op)) result.entries_.emplace(key, entry);
  }
  return result;
}

nlohmann::json AutotuneCache::to_json() const {
  json entries = json::object();
  for (const auto& [key, entry] : entries_) {
    entries[key.device][key.op][key.args][key.impl] = entry.to_json();
  }
  return {{"format_version", kFormatVersion}, {"entries", std::move(entries)}};
}

std::string AutotuneCache::dump() const { return to_json().dump(2) + "\n"; }

}  // namespace tokamax
