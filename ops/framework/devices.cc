// Device selection by name.
#include "ops/framework/devices.h"

#include <string>

#include "backends/registry.h"
#include "ops/framework/errors.h"

namespace tokamax {

const Device& resolve_device(std::string_view name) {
  if (name.empty()) return default_device();
  const Device* device = find_device(name);
  if (device == nullptr) {
    throw InvalidArgument(
        "unknown device '" + std::string(name) + "' (available: " + device_names() + ")", "device");
  }
  return *device;
}

}  // namespace tokamax
