// The autotuning cache: device -> op -> canonical bound args -> implementation -> entry.
//
// File format (user cache, shipped cache results/autotuning/<device>/<op>.json and export-cache
// output all share it; keys sorted, so files diff well):
//
//   {
//     "format_version": 1,
//     "entries": {
//       "<device id>": {
//         "<op>": {
//           "<BoundArgs::key()>": {
//             "<implementation>": {
//               "config": {...}, "time_s": 1.2e-3, "samples": [...], "verified": true,
//               "candidates": [...], "metadata": {...}
//             }
//           }
//         }
//       }
//     }
//   }
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tokamax {

struct CacheEntry {
  nlohmann::json config = nlohmann::json::object();
  double time_s = 0.0;          // median time of the winning config
  std::vector<double> samples;  // its timing samples, seconds
  bool verified = false;        // checked against the float64 oracle before it won
  nlohmann::json candidates = nlohmann::json::array();  // [{config, time_s|status, reason}]
  nlohmann::json metadata = nlohmann::json::object();   // see ops/framework/metadata.h

  nlohmann::json to_json() const;
  // Throws InvalidArgument naming the bad field.
  static CacheEntry from_json(const nlohmann::json& value);
};

// Identifies one entry.
struct CacheKey {
  std::string device;
  std::string op;
  std::string args;  // BoundArgs::key()
  std::string impl;
  auto operator<=>(const CacheKey&) const = default;
};

// Two entries for the same key with different configs, reported by merge().
struct MergeConflict {
  CacheKey key;
  nlohmann::json kept_config;
  double kept_time_s = 0.0;
  nlohmann::json dropped_config;
  double dropped_time_s = 0.0;
};

class AutotuneCache {
 public:
  static constexpr int kFormatVersion = 1;

  // A missing file is an empty cache. A file that is not a valid cache throws InputError naming
  // the file and the line/column (JSON syntax) or the JSON path (schema).
  static AutotuneCache load(const std::string& path);
  static AutotuneCache parse(std::string_view text, const std::string& source_name);

  const CacheEntry* find(const CacheKey& key) const;
  // Inserts or replaces.
  void put(const CacheKey& key, CacheEntry entry);
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::map<CacheKey, CacheEntry>& entries() const { return entries_; }

  // Adds other's entries. On a collision the faster verified entry wins (a verified entry beats
  // an unverified one; equal times keep the newer timestamp); a collision with different configs
  // is returned as a conflict.
  std::vector<MergeConflict> merge(const AutotuneCache& other);
  // Entries whose device / op match (empty = any).
  AutotuneCache filtered(const std::vector<std::string>& devices,
                         const std::vector<std::string>& ops) const;

  nlohmann::json to_json() const;
  std::string dump() const;  // canonical: sorted keys, 2-space indent, trailing newline

  // Read-modify-write of a cache file under an exclusive lock (flock on "<path>.lock"), written to
  // a temporary file and renamed over the original, so concurrent writers lose nothing and a
  // crash never leaves a half-written cache. A corrupt existing file throws InputError and is
  // left untouched. Temporary files of writers that were killed mid-write are removed.
  static void update_file(const std::string& path,
                          const std::function<void(AutotuneCache&)>& mutate);
  // Writes atomically (temp + rename), creating parent directories.
  void save(const std::string& path) const;

 private:
  std::map<CacheKey, CacheEntry> entries_;
};

// $XDG_CACHE_HOME/tokamax/autotuning.json, or ~/.cache/tokamax/autotuning.json.
std::string default_user_cache_path();

// The cache shipped in the binary (results/autotuning/<device>/<op>.json, embedded at build time),
// parsed once.
const AutotuneCache& shipped_cache();

}  // namespace tokamax
