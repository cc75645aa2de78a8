// The device registry: the host CPU (backends/cpu/), listed first, then the CUDA devices
// (backends/cuda/) when the build has the backend and the machine a GPU.
#include "backends/registry.h"

#include <charconv>

#include "backends/cpu/cpu_device.h"
#include "backends/cuda/cuda_device.h"

namespace tokamax {

const std::vector<const Device*>& available_devices() {
  static const std::vector<const Device*> devices = [] {
    std::vector<const Device*> all = {&cpu::host_device()};
    for (const Device* device : cuda::devices()) all.push_back(device);
    return all;
  }();
  return devices;
}

const Device& default_device() { return *available_devices().front(); }

const Device* find_device(std::string_view name) {
  const size_t colon = name.find(':');
  const std::string_view kind = name.substr(0, colon);
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view digits = name.substr(colon + 1);
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() ||
        index < 0) {
      return nullptr;
    }
  }
  int seen = 0;
  for (const Device* device : available_devices()) {
    if (device->id() == name) return device;
    if (device->kind() == kind && seen++ == index) return device;
  }
  return nullptr;
}

std::vector<UnavailableBackend> unavailable_backends() {
  std::vector<UnavailableBackend> out;
  if (cuda::devices().empty()) out.push_back({"cuda", cuda::unavailable_reason()});
  return out;
}

std::string device_names() {
  std::string names;
  int index = 0;
  std::string previous_kind;
  for (const Device* device : available_devices()) {
    index = device->kind() == previous_kind ? index + 1 : 0;
    previous_kind = device->kind();
    names += (names.empty() ? "" : ", ") + device->kind() + ":" + std::to_string(index) + " (" +
             device->id() + ")";
  }
  return names;
}

}  // namespace tokamax
