// Build info and the metadata block every JSON record carries.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "backends/device.h"

namespace tokamax {

struct BuildInfo {
  std::string version;
  std::string git_sha;
  std::string compiler;
  std::string flags;
  std::string build_type;
  std::string cuda;  // "nvcc 13.0, sm 90a", or "not built: <why>"
};
const BuildInfo& build_info();  // generated at build time (cmake/build_info.cmake)

// The command line of this process, shell-quoted, as given to set_command_line().
void set_command_line(int argc, const char* const* argv);
const std::string& command_line();

// {"tokamax_version", "git_sha", "compiler", "flags", "build_type", "cuda", "device_id", "device",
//  "timestamp", "command"}: the part of every record that does not depend on the case.
nlohmann::json run_metadata(const Device& device);

}  // namespace tokamax
