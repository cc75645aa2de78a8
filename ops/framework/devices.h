// Device selection for the framework and the CLI: a name from the command line or a worker
// request -> one of the registry's devices (backends/registry.h).
#pragma once

#include <string_view>

#include "backends/device.h"

namespace tokamax {

// The device `name` names ("cpu", "cpu:0" or a device id); the default device when `name` is
// empty. Throws InvalidArgument (field "device") listing the available devices otherwise.
const Device& resolve_device(std::string_view name);

}  // namespace tokamax
