// Where a tensor's bytes live: the memory part of the backend seam.
//
// Inputs are generated in host memory (from a seed, the same on every device) and moved once
// per case to the memory of the device that runs the case; outputs come back to host memory
// for verification. On the CPU the device's memory is host memory and nothing moves.
#pragma once

#include <cstddef>
#include <string_view>

namespace tokamax {

class Memory {
 public:
  virtual ~Memory() = default;
  virtual std::string_view name() const = 0;  // "host"
  // Whether code on the host may dereference this memory's pointers.
  virtual bool host_accessible() const = 0;
  // At least `bytes` bytes (0 allowed), 64-byte aligned, not zeroed. Throws std::bad_alloc.
  virtual void* allocate(size_t bytes) const = 0;
  virtual void free(void* p) const = 0;
  virtual void zero(void* p, size_t bytes) const = 0;
  // Copies between this memory and host memory.
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) const = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) const = 0;
};

// Host memory: 64-byte aligned, large buffers on transparent huge pages
// (backends/cpu/host_memory.h).
const Memory& host_memory();

}  // namespace tokamax
