// Files other processes read while this one writes: atomic replacement and an exclusive lock.
#pragma once

#include <string>
#include <string_view>

namespace tokamax {

// Replaces `path` with `text` so that a reader sees the old file or the new one, never a part:
// a unique temporary file beside it, fsync, rename, then a (best effort) sync of the folder.
// Creates missing parent folders. Throws std::system_error naming the file.
void write_file_atomically(const std::string& path, const std::string& text);

// Whether `name` can be one component of a path under a folder the user named without leaving it
// or failing: not empty, "." or "..", no '/' or NUL, at most 128 bytes. Names that come from
// files (spec names, device ids, op names) pass this before they become folder or file names.
bool is_safe_file_name(std::string_view name);

// Removes the temporary files that write_file_atomically(path) left behind in processes that died
// before their rename (a SIGKILL, the OOM killer): "<path>.tmp.<pid>.<n>" whose pid is not a live
// process. Call it holding the FileLock of `path`, so no locked writer is mid-write. Best effort;
// returns how many it removed.
int remove_stale_temp_files(const std::string& path);

// Creates the parent folders of `path`; throws std::system_error naming the folder.
void create_parent_directories(const std::string& path);

// An exclusive flock on `<path>.lock` for the lifetime of the object. The lock file is never
// renamed or deleted: locking `path` itself would lock an inode that an atomic replacement swaps
// out, letting a waiting writer read a stale file. Throws std::system_error when the lock file
// cannot be opened or locked.
class FileLock {
 public:
  explicit FileLock(const std::string& path);
  ~FileLock();  // closing the descriptor releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace tokamax
