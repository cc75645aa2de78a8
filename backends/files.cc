// Atomic file replacement and lock files.
#include "backends/files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <string_view>
#include <system_error>

namespace tokamax {
namespace {

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// Owns a file descriptor.
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

constexpr std::string_view kTempInfix = ".tmp.";

// The pid keeps concurrent processes apart, the counter concurrent writers within one process.
std::string unique_temp_path(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  return path + std::string(kTempInfix) + std::to_string(::getpid()) + "." +
         std::to_string(counter++);
}

// The pid of "<pid>.<n>", or 0 when `suffix` is not of that form.
pid_t temp_writer_pid(std::string_view suffix) {
  const auto digits = [](std::string_view text, size_t max_size) {
    return !text.empty() && text.size() <= max_size &&
           std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  const size_t dot = suffix.find('.');
  if (dot == std::string_view::npos) return 0;
  const std::string_view pid_text = suffix.substr(0, dot);
  if (!digits(pid_text, 9) || !digits(suffix.substr(dot + 1), 10)) return 0;
  return static_cast<pid_t>(std::stol(std::string(pid_text)));
}

// A rename is only durable once the folder holding it is synced; best effort (some file systems
// refuse fsync on a folder, and the data itself is already on disk).
void sync_parent_directory(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  if (parent.empty()) parent = ".";
  FileDescriptor dir(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() >= 0) ::fsync(dir.get());
}

}  // namespace

int remove_stale_temp_files(const std::string& path) {
  const std::filesystem::path target(path);
  const std::string prefix = target.filename().string() + std::string(kTempInfix);
  std::filesystem::path folder = target.parent_path();
  if (folder.empty()) folder = ".";
  int removed = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const pid_t pid = temp_writer_pid(std::string_view(name).substr(prefix.size()));
    // ESRCH: no such process. EPERM means it exists (another user's): leave it.
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;
    if (std::filesystem::remove(entry.path(), ignored)) ++removed;
  }
  return removed;
}

void create_parent_directories(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code error;
  std::filesystem::create_directories(parent, error);
  if (error) throw std::system_error(error, "cannot create directory " + parent.string());
}

void write_file_atomically(const std::string& path, const std::string& text) {
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

FileLock::FileLock(const std::string& path) {
  create_parent_directories(path);
  const std::string lock_path = path + ".lock";
  fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_errno("cannot open lock file " + lock_path);
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      const int error = errno;
      ::close(fd_);
      throw std::system_error(error, std::generic_category(), "cannot lock " + lock_path);
    }
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

bool is_safe_file_name(std::string_view name) {
  constexpr size_t kMaxName = 128;  // well under NAME_MAX (255), with room for suffixes
  return !name.empty() && name != "." && name != ".." && name.size() <= kMaxName &&
         name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

}  // namespace tokamax
