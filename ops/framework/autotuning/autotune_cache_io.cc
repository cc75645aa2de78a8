// The autotuning cache on disk and in the binary: load, atomic save, locked update, shipped.
#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "ops/framework/autotuning/autotune_cache.h"
#include "ops/framework/embedded.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

// Owns a file descriptor; closing it also releases a flock taken through it.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() { close(); }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  int close() {
    const int result = fd_ >= 0 ? ::close(fd_) : 0;
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

void write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      throw_errno("cannot write " + path);
    }
    data.remove_prefix(static_cast<size_t>(written));
  }
}

void create_parent_directories(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code error;
  std::filesystem::create_directories(parent, error);
  if (error) throw std::system_error(error, "cannot create directory " + parent.string());
}

// The pid keeps concurrent processes apart, the counter concurrent saves within one process.
std::string unique_temp_path(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

// A rename is only durable once the directory holding it is synced; best effort (some file
// systems refuse fsync on a directory, and the data itself is already on disk).
void sync_parent_directory(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  if (parent.empty()) parent = ".";
  FileDescriptor dir(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() >= 0) ::fsync(dir.get());
}

std::string home_directory() {
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return home;
  // No $HOME (some service accounts, containers): ask the password database.
  passwd record{};
  passwd* found = nullptr;
  char buffer[4096];
  if (::getpwuid_r(::getuid(), &record, buffer, sizeof(buffer), &found) == 0 && found != nullptr &&
      found->pw_dir != nullptr) {
    return found->pw_dir;
  }
  return "";
}

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

void AutotuneCache::save(const std::string& path) const {
  const std::string text = dump();
  create_parent_directories(path);
  const std::string temp = unique_temp_path(path);
  FileDescriptor fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw_errno("cannot create " + temp);
  try {
    write_all(fd.get(), text, temp);
    // fsync before rename: otherwise a crash can leave the new name pointing at an empty file.
    if (::fsync(fd.get()) != 0) throw_errno("cannot sync " + temp);
    if (fd.close() != 0) throw_errno("cannot close " + temp);
    if (::rename(temp.c_str(), path.c_str()) != 0) {
      throw_errno("cannot rename " + temp + " to " + path);
    }
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  sync_parent_directory(path);
}

void AutotuneCache::update_file(const std::string& path,
                                const std::function<void(AutotuneCache&)>& mutate) {
  create_parent_directories(path);
  // A separate lock file, never renamed or deleted: locking the cache file itself would lock an
  // inode that the rename below replaces, letting a waiting writer read a stale file.
  const std::string lock_path = path + ".lock";
  FileDescriptor lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock.get() < 0) throw_errno("cannot open lock file " + lock_path);
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) throw_errno("cannot lock " + lock_path);
  }
  AutotuneCache cache = load(path);  // a corrupt file throws here, before anything is written
  mutate(cache);
  cache.save(path);
}  // closing `lock` releases the lock

std::string default_user_cache_path() {
  // XDG base directory spec: a relative XDG_CACHE_HOME is invalid and must be ignored.
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  std::filesystem::path base;
  if (xdg != nullptr && xdg[0] == '/') {
    base = xdg;
  } else {
    const std::string home = home_directory();
    if (home.empty()) {
      throw std::runtime_error(
          "cannot locate the user cache: neither XDG_CACHE_HOME nor HOME is set");
    }
    base = std::filesystem::path(home) / ".cache";
  }
  return (base / "tokamax" / "autotuning.json").string();
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
