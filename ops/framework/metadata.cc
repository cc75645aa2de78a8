// Build and run metadata for JSON records.
#include "ops/framework/metadata.h"

namespace tokamax {
namespace {

std::string& command_line_storage() {
  static std::string line;
  return line;
}

// Single-quotes an argument when the shell would split or expand it.
std::string shell_quote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789-_./=:,+@%") == std::string::npos) {
    return arg;
  }
  std::string quoted(1, '\'');
  for (char c : arg) {
    if (c == '\'') {
      quoted.append("'\\''");
    } else {
      quoted.push_back(c);
    }
  }
  quoted.push_back('\'');
  return quoted;
}

}  // namespace

void set_command_line(int argc, const char* const* argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) line += (i ? " " : "") + shell_quote(argv[i]);
  command_line_storage() = line;
}

const std::string& command_line() { return command_line_storage(); }

nlohmann::json run_metadata(const Device& device) {
  const BuildInfo& build = build_info();
  return {{"tokamax_version", build.version}, {"git_sha", build.git_sha},
          {"compiler", build.compiler},       {"flags", build.flags},
          {"build_type", build.build_type},   {"cuda", build.cuda},
          {"device_id", device.id()},         {"device", device.info().description},
          {"timestamp", utc_now()},           {"command", command_line()}};
}

}  // namespace tokamax
