// Per-thread kernel scratch that only grows.
//
// Pool threads are persistent, so a kernel that keeps its scratch in a `thread_local
// ScratchBuffer` allocates nothing after its first call on each thread: a fresh multi-megabyte
// allocation per call would come from mmap and page-fault on first touch, a cost that shows up
// on every small call. Each user keeps its own buffer (a kernel calling cpu_gemm_f32 must not
// share it with the GEMM's packing buffers).
#pragma once

#include <cstddef>
#include <vector>

#include "backends/cpu/host_memory.h"

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

// One call's per-thread partial sums (a reduction over rows that each thread accumulates, then
// the caller adds up): `threads` zeroed blocks of `floats` f32 each, every block starting on its
// own cache line and padded to whole lines. Threads that update their sums often must not share
// a line: with a plain std::vector (16-byte alignment) the last line of one thread's block could
// be the first of the next, and the layer_norm backward (per-thread sums updated every 4 rows)
// ran at one thread's speed in the processes whose allocation landed that way.
class PerThreadSums {
 public:
  static constexpr size_t kLineFloats = 64 / sizeof(float);

  PerThreadSums(int threads, size_t floats);
  float* of(int thread) { return data_.data() + offset(thread); }
  const float* of(int thread) const { return data_.data() + offset(thread); }
  int threads() const { return threads_; }
  size_t stride() const { return stride_; }  // floats from one block to the next

 private:
  size_t offset(int thread) const { return static_cast<size_t>(thread) * stride_; }

  int threads_;
  size_t stride_;
  std::vector<float, HostAllocator<float>> data_;
};

}  // namespace tokamax::cpu
