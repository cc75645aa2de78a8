// The CUDA backend of a build without it: no devices, and why (TOKAMAX_CUDA_WHY from CMake).
#include <stdexcept>

#include "backends/cuda/cuda_device.h"

namespace tokamax::cuda {

const std::vector<const Device*>& devices() {
  static const std::vector<const Device*> none;
  return none;
}

const std::string& unavailable_reason() {
  static const std::string reason = std::string("not built: ") + TOKAMAX_CUDA_WHY;
  return reason;
}

void* stream(const Device& device) {
  throw std::logic_error("no CUDA backend in this build for device " + device.id());
}

int ordinal(const Device& device) {
  throw std::logic_error("no CUDA backend in this build for device " + device.id());
}

}  // namespace tokamax::cuda
