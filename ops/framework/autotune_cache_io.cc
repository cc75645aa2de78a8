// The autotuning cache on disk and in the binary: load, atomic save, locked update, shipped.
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

#include "backends/files.h"
#include "backends/user_dirs.h"
#include "ops/framework/autotune_cache.h"
#include "ops/framework/embedded.h"
#include "ops/framework/errors.h"
#include "ops/framework/input_file.h"

namespace tokamax {

AutotuneCache AutotuneCache::load(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 && errno == ENOENT) return {};
  return parse(read_input_file(path, kMaxJsonInputBytes, "autotuning cache"), path);
}

void AutotuneCache::save(const std::string& path) const { write_file_atomically(path, dump()); }

void AutotuneCache::update_file(const std::string& path,
                                const std::function<void(AutotuneCache&)>& mutate) {
  const FileLock lock(path);
  remove_stale_temp_files(path);     // of writers killed before their rename
  AutotuneCache cache = load(path);  // a corrupt file throws here, before anything is written
  mutate(cache);
  cache.save(path);
}  // releases the lock

std::string default_user_cache_path() {
  return (std::filesystem::path(user_cache_dir()) / "autotuning.json").string();
}

const AutotuneCache& shipped_cache() {
  static const AutotuneCache cache = [] {
    constexpr std::string_view kPrefix = "results/autotuning/";
    constexpr std::string_view kSuffix = ".json";
    AutotuneCache merged;
    for (const EmbeddedFile& file : embedded_files(kPrefix)) {
      const std::string path(file.path);
      if (!path.ends_with(kSuffix)) continue;
      // <device>/<op>.json: the layout is how export-cache --out-dir writes it.
      const std::string relative = path.substr(kPrefix.size());
      const size_t slash = relative.find('/');
      if (slash == std::string::npos || relative.find('/', slash + 1) != std::string::npos) {
        throw InputError(path, 0, 0,
                         "shipped caches belong at results/autotuning/<device>/<op>.json");
      }
      const std::string device = relative.substr(0, slash);
      const std::string op =
          relative.substr(slash + 1, relative.size() - slash - 1 - kSuffix.size());
      AutotuneCache file_cache = AutotuneCache::parse(file.content, path);
      for (const auto& [key, entry] : file_cache.entries()) {
        if (key.device != device || key.op != op) {
          throw InputError(path, 0, 0,
                           "holds an entry for device " + key.device + ", op " + key.op +
                               "; it belongs in results/autotuning/" + key.device + "/" + key.op +
                               ".json");
        }
      }
      merged.merge(file_cache);
    }
    return merged;
  }();
  return cache;
}

}  // namespace tokamax
