// TOKAMAX_RECORD: appends one JSON line per high-level API call, safe across threads and processes.
#include "ops/framework/record.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>

#include "ops/framework/metadata.h"

namespace tokamax {
namespace {

// One descriptor per process, reopened when the path changes. Opening per call would cost more
// than the small calls being recorded; O_APPEND makes every write() land at the current end even
// when other processes append to the same file.
struct RecordFile {
  std::mutex mutex;
  std::string path;
  int fd = -1;
  bool warned = false;
};

RecordFile& record_file() {
  static RecordFile* file = new RecordFile();  // never destroyed: calls may run during exit
  return *file;
}

}  // namespace

nlohmann::json call_record(const BoundArgs& args, std::string_view implementation,
                           const ResolvedConfig& config, const std::string& device_id) {
  return {{"op", args.op},
          {"args", args.args},
          {"key", args.key()},
          {"implementation", std::string(implementation)},
          {"config_source", std::string(config_source_name(config.source))},
          {"config", config.kernel.config},
          {"timestamp", utc_now()},
          {"device_id", device_id}};
}

bool append_record_line(const std::string& path, const std::string& line, std::string& error) {
  RecordFile& file = record_file();
  const std::string text = line + "\n";
  std::lock_guard<std::mutex> lock(file.mutex);
  if (file.fd < 0 || file.path != path) {
    if (file.fd >= 0) close(file.fd);
    file.path = path;
    file.fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (file.fd < 0) {
      error = "cannot open " + path + ": " + std::strerror(errno);
      return false;
    }
  }
  // A single write() per line: with O_APPEND the kernel places it atomically at the end of a
  // regular file, so lines from several processes never interleave.
  const ssize_t written = write(file.fd, text.data(), text.size());
  if (written != static_cast<ssize_t>(text.size())) {
    error = "cannot append to " + path + ": " +
            (written < 0 ? std::strerror(errno) : std::string("short write"));
    close(file.fd);
    file.fd = -1;
    return false;
  }
  return true;
}

void record_call(const BoundArgs& args, std::string_view implementation,
                 const ResolvedConfig& config, const std::string& device_id) noexcept {
  const char* path = std::getenv(kRecordEnv);
  if (path == nullptr || *path == '\0') return;
  std::string error;
  try {
    const std::string line = call_record(args, implementation, config, device_id).dump();
    if (append_record_line(path, line, error)) return;
  } catch (const std::exception& e) {
    error = e.what();
  }
  RecordFile& file = record_file();
  try {
    std::lock_guard<std::mutex> lock(file.mutex);
    if (file.warned) return;
    file.warned = true;
    std::cerr << "tokamax: warning: " << kRecordEnv << ": " << error
              << " (further recording errors are not reported)\n";
  } catch (...) {
    // Recording must never throw into the application.
  }
}

}  // namespace tokamax
