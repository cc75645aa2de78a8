// The implementations a command left out because they need another kind of device (a CUDA
// kernel on a machine without a GPU): listed once under the table instead of a row each.
#pragma once

#include <string>
#include <vector>

namespace tokamax::cli {

struct OtherDeviceRun {
  std::string op;
  std::string impl;
  std::string reason;  // Support::reason
};

// One line per reason, implementations and their ops in first-seen order: "not run on <device>:
// cublas (ragged_dot, ragged_dot_vjp), cudnn (ragged_dot): <reason>".
std::vector<std::string> other_device_notes(const std::vector<OtherDeviceRun>& runs,
                                            const std::string& device);

}  // namespace tokamax::cli
