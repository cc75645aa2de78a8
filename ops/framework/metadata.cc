// Build and run metadata for JSON records.
#include "ops/framework/metadata.h"

#include <ctime>

#include "backends/cpu/cpu_info.h"

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

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

nlohmann::json run_metadata() {
  const BuildInfo& build = build_info();
  const DeviceInfo& device = cpu::host_device();
  return {{"tokamax_version", build.version}, {"git_sha", build.git_sha},
          {"compiler", build.compiler},       {"flags", build.flags},
          {"build_type", build.build_type},   {"device_id", device.id},
          {"device", device.description()},   {"timestamp", utc_timestamp()},
          {"command", command_line()}};
}

}  // namespace tokamax
