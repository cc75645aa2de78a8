// Per-thread kernel scratch that only grows.
#include "backends/cpu/scratch.h"

#include <cstdlib>
#include <new>

namespace tokamax::cpu {

ScratchBuffer::~ScratchBuffer() { std::free(data_); }

void* ScratchBuffer::get(size_t bytes) {
  if (bytes > bytes_ || data_ == nullptr) {
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment + kAlignment;
    std::free(data_);
    bytes_ = 0;
    data_ = std::aligned_alloc(kAlignment, rounded);
    if (data_ == nullptr) throw std::bad_alloc();
    bytes_ = rounded;
  }
  return data_;
}

PerThreadSums::PerThreadSums(int threads, size_t floats)
    : threads_(threads > 0 ? threads : 1),
      stride_((floats + kLineFloats - 1) / kLineFloats * kLineFloats),
      data_(static_cast<size_t>(threads_) * stride_, 0.0f) {
  static_assert(kHostAlignment % 64 == 0, "blocks must start on cache lines");
}

}  // namespace tokamax::cpu
