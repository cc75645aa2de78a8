// The CUDA backend as the rest of the code sees it: the CUDA devices this process can use, or
// why there are none. Including this needs no CUDA header; without the CUDA backend in the build
// (TOKAMAX_CUDA), not_built.cc answers instead of cuda_device.cc.
#pragma once

#include <mutex>
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

// What CUDA implementations call around their kernels, on `device`'s stream (a CUDA device;
// defined in builds with the backend only):
//   memset_async   sets `bytes` bytes at `p` to zero;
//   copy_to_host   copies device memory to the host and waits for it (and for the stream's work
//                  before it);
//   scratch        a grow-only workspace of at least `bytes` bytes, one per device and process,
//                  valid until the next call; the caller holds scratch_mutex() while it enqueues
//                  work that uses it (stream order keeps later users from overwriting it).
void memset_async(const Device& device, void* p, size_t bytes);
void copy_to_host(const Device& device, void* host, const void* device_ptr, size_t bytes);
void* scratch(const Device& device, size_t bytes);
std::mutex& scratch_mutex(const Device& device);

// The 16-bit tensor-core ceiling is the fastest of several probes (mma.sync chains, a large
// cuBLAS GEMM, and what layers above the device offer here: ragged_dot's widest CUTLASS variant,
// which issues wgmma as our kernels do). A probe runs an n x n x n GEMM of bf16 (else f16)
// operands on `device`, `repetitions` times, and returns its best GFLOP/s, 0 where it cannot
// run. Offered once at static initialization (defined in builds with the backend only);
// tensor_core_probe_names() lists those offered, in order.
using TensorCoreProbe = double (*)(const Device& device, bool bf16, int n, int repetitions);
void add_tensor_core_probe(std::string name, TensorCoreProbe probe);
std::vector<std::string> tensor_core_probe_names();

}  // namespace tokamax::cuda
