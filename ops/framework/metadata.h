// Build info and the metadata block every JSON record carries.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tokamax {

struct BuildInfo {
  std::string version;
  std::string git_sha;
  std::string compiler;
  std::string flags;
  std::string build_type;
};
const BuildInfo& build_info();  // generated at build time (cmake/build_info.cmake)

// The command line of this process, shell-quoted, as given to set_command_line().
void set_command_line(int argc, const char* const* argv);
const std::string& command_line();

// ISO-8601 UTC, e.g. "2026-11-29T10:15:00Z".
std::string utc_timestamp();

// {"tokamax_version", "git_sha", "compiler", "flags", "build_type", "device": {...},
//  "timestamp", "command"}: the part of every record that does not depend on the case.
nlohmann::json run_metadata();

}  // namespace tokamax
