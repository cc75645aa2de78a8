// Shared test helpers: a scratch directory and running the tokamax binary.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace tokamax::testing {

// A fresh, empty directory removed at scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tokamax-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line, capturing stdout+stderr and the exit code.
inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// The children of this process and their states from /proc/<pid>/stat ('Z': a zombie, ended
// but not waited for).
inline std::map<pid_t, char> child_processes() {
  std::map<pid_t, char> children;
  const pid_t self = getpid();
  std::error_code error;
  for (std::filesystem::directory_iterator it("/proc", error), end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c)) != 0;
        })) {
      continue;
    }
    std::ifstream stat(it->path() / "stat");
    std::string text;
    std::getline(stat, text);
    const size_t close = text.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos || close + 2 > text.size()) continue;
    std::istringstream rest(text.substr(close + 2));
    char state = 0;
    pid_t parent = 0;
    if (rest >> state >> parent && parent == self) children[std::stoi(name)] = state;
  }
  return children;
}

// How many children of this process are zombies.
inline int zombie_children() {
  int zombies = 0;
  for (const auto& [pid, state] : child_processes()) zombies += state == 'Z';
  return zombies;
}

#ifdef TOKAMAX_BIN
// Runs the built `tokamax` binary with `args` (a shell-quoted argument string).
inline CommandResult run_tokamax(const std::string& args) {
  return run_command(std::string(TOKAMAX_BIN) + " " + args);
}
#endif

}  // namespace tokamax::testing
