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

}  // namespace tokamax::cpu
