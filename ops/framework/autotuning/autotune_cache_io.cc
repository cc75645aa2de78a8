// The autotuning cache on disk and in the binary: load, atomic save, locked update, shipped.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "backends/files.h"
#include "backends/user_dirs.h"
#include "ops/framework/autotuning/autotune_cache.h"
#include "ops/framework/embedded.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

// Owns a file descriptor.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

AutotuneCache AutotuneCache::load(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int error = errno;
    if (error == ENOENT) return {};
    throw InputError(path, 0, 0, std::string("cannot read: ") + std::strerror(error));
  }
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t count = ::read(fd.get(), buffer, sizeof(buffer));
    if (count == 0) break;
    if (count < 0) {
      if (errno == EINTR) continue;
      throw InputError(path, 0, 0, std::string("cannot read: ") + std::strerror(errno));
    }
    text.append(buffer, static_cast<size_t>(count));
  }
  return parse(text, path);
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
