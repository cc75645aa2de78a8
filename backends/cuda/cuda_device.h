// The CUDA backend as the rest of the code sees it: the CUDA devices this process can use, or
// why there are none. Including this needs no CUDA header; without the CUDA backend in the build
// (TOKAMAX_CUDA), not_built.cc answers instead of cuda_device.cc.
#pragma once

#include <string>
#include <vector>

#include "backends/device.h"

namespace tokamax::cuda {

// Every CUDA device of this process, in the runtime's order (cuda:0, cuda:1, ...); empty without
// a device, a driver or the backend. Found on first use; they live for the process.
const std::vector<const Device*>& devices();

// Why devices() is empty: "not built: ...", "no CUDA device: <the runtime's error>"; "" when it is
// not.
const std::string& unavailable_reason();

// The stream of `device` (a CUDA device), as the runtime's cudaStream_t: one per device and
// process, so each worker has its own. Kernels and libraries issue their work on it.
void* stream(const Device& device);

// The runtime's device ordinal of `device` (a CUDA device).
int ordinal(const Device& device);

}  // namespace tokamax::cuda
