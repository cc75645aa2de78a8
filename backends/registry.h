// The devices this build can run on: the host CPU always; each backend adds the ones it finds.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "backends/device.h"

namespace tokamax {

// Every available device, the default one (the host CPU) first. Devices live for the process.
const std::vector<const Device*>& available_devices();
// The device commands and the API use when none is named: the first available one.
const Device& default_device();
// The device named by `name`: "<kind>" (the first of that kind), "<kind>:<index>" (the index-th
// of that kind, from 0), or a device id. nullptr when none matches.
const Device* find_device(std::string_view name);
// "cpu:0 (cpu-amd-...)" for each device: what an error about an unknown name lists.
std::string device_names();

// A backend of this program that has no device here, and why ("cuda": "not built: ..." or
// "no CUDA device: ...").
struct UnavailableBackend {
  std::string kind;
  std::string reason;
};
std::vector<UnavailableBackend> unavailable_backends();

}  // namespace tokamax
