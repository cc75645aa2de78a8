// ragged_dot on CUDA: the cache of initialized CUTLASS GEMMs, in plain C++17 (no CUDA or CUTLASS
// header), so that the CPU tests check which launches may share an initialization.
//
// CUTLASS's initialize() builds the kernel's parameters on the host (the scheduler's grid, the
// kernel attributes) for every call, which is host latency inside every timed sample. Our
// arguments to it hold no problem shape and no operand pointer: those reach the kernel only
// through the group tables the setup kernel rewrites in the workspace on every call
// (cuda_grouped_gemm.cuh), and the grouped kernel's workspace initialization is empty (its
// scheduler, mainloop and epilogue initialize nothing; the TMA descriptors are built on the
// device per group). So an initialized GEMM serves every later launch with the same key below,
// and a call then only enqueues its kernels.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <utility>

#include "ops/ragged_dot/cuda_kernel.h"

namespace tokamax::ragged_cuda {

// What CUTLASS's arguments are made of (RaggedGemm::arguments): the tables' addresses (the
// workspace and G, which places them), the device and its SM count, the scheduler's options.
struct InitKey {
  const void* workspace = nullptr;
  int G = 0;
  int device = 0;
  int sm_count = 0;
  int raster_along_n = 0;
  int swizzle = 1;

  bool operator==(const InitKey& o) const {
    return workspace == o.workspace && G == o.G && device == o.device && sm_count == o.sm_count &&
           raster_along_n == o.raster_along_n && swizzle == o.swizzle;
  }
};

inline InitKey init_key(const CudaRaggedDotLaunch& l) {
  return InitKey{l.workspace, l.G, l.device, l.sm_count, l.raster_along_n, l.swizzle};
}

// The last `capacity` initialized GEMMs of one variant, most recently used first. Launches of
// different devices may run at once (each holds only its own device's scratch lock), so the
// cache has a lock of its own, held while a GEMM is initialized and enqueued: both are short
// host work.
template <class Gemm>
class InitCache {
 public:
  explicit InitCache(size_t capacity) : capacity_(capacity) {}

  // Runs use(gemm) on the GEMM initialized for `key`, calling init(gemm) first on a miss. A GEMM
  // whose init or use throws is not kept, so the next call initializes afresh.
  template <class Init, class Use>
  void with(const InitKey& key, Init&& init, Use&& use) {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.begin();
    while (it != entries_.end() && !(it->first == key)) ++it;
    if (it == entries_.end()) {
      std::list<std::pair<InitKey, Gemm>> fresh(1);
      fresh.front().first = key;
      init(fresh.front().second);
      ++initializations_;
      entries_.splice(entries_.begin(), fresh);
      if (entries_.size() > capacity_) entries_.pop_back();
    } else if (it != entries_.begin()) {
      entries_.splice(entries_.begin(), entries_, it);
    }
    try {
      use(entries_.front().second);
    } catch (...) {
      entries_.pop_front();
      throw;
    }
  }

  // For tests: how many times init ran, and how many GEMMs are kept.
  size_t initializations() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return initializations_;
  }
  size_t size() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }

 private:
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::list<std::pair<InitKey, Gemm>> entries_;
  size_t initializations_ = 0;
};

}  // namespace tokamax::ragged_cuda
