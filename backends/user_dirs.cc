// Per-user folders (XDG base directory specification).
#include "backends/user_dirs.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace tokamax {
namespace {

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

std::string user_cache_dir() {
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
  return (base / "tokamax").string();
}

}  // namespace tokamax
