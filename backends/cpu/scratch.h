// Per-thread kernel scratch that only grows.
//
// Pool threads are persistent, so a kernel that keeps its scratch in a `thread_local
// ScratchBuffer` allocates nothing after its first call on each thread: a fresh multi-megabyte
// allocation per call would come from mmap and page-fault on first touch, a cost that shows up
// on every small call. Each user keeps its own buffer (a kernel calling cpu_gemm_f32 must not
// share it with the GEMM's packing buffers).
#pragma once

#include <cstddef>

namespace tokamax::cpu {

class ScratchBuffer {
 public:
  static constexpr size_t kAlignment = 64;  // a cache line; also the widest SIMD register

  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer();

  // At least `bytes` bytes, 64-byte aligned; the previous contents are lost when it grows.
  // Throws std::bad_alloc.
  void* get(size_t bytes);
  float* floats(size_t count) { return static_cast<float*>(get(count * sizeof(float))); }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tokamax::cpu
