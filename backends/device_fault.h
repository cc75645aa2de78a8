// DeviceFault: the error after which a process can no longer use a device. Its own header, so
// that CUDA translation units can throw it without the rest of the seam (backends/device.h).
#pragma once

#include <stdexcept>
#include <string>

namespace tokamax {

// The device can no longer be used by this process: a kernel faulted and took the device's state
// with it (CUDA's sticky errors: an illegal address, a launch failure, a trap). Nothing that
// catches errors to report them row by row may swallow it: a worker that meets it reports a
// crash with its message and exits, so that the next request starts in a fresh process.
class DeviceFault : public std::runtime_error {
 public:
  explicit DeviceFault(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace tokamax
