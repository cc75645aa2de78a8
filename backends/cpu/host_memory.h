// Host buffers for tensors and bandwidth probes: 64-byte aligned; large ones backed by
// transparent huge pages.
//
// A strided kernel (layer_norm on a non-last axis: 128 rows 1.2 MB apart per block) touches a
// new 4 KiB page every few cache lines, so on 4 KiB pages its core spends its outstanding misses
// on page walks. Buffers of at least kHugePageMinBytes are therefore 2 MiB aligned and advised
// with madvise(MADV_HUGEPAGE), as a production allocator does (tcmalloc's hugepage-aware
// allocator, glibc with THP "always"). Every implementation's tensors and the triad probe's
// arrays get the same pages, so ratios and rooflines stay like for like.
//
// TOKAMAX_HUGE_PAGES=0 (or off / false / no) turns the advice off, to measure on 4 KiB pages;
// another value than those or 1 / on / true / yes gets a warning on stderr and the default. The
// kernel's transparent_hugepage setting decides what the advice can do (never: nothing).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "backends/memory.h"

namespace tokamax::cpu {

inline constexpr size_t kHostAlignment = 64;           // a cache line; the widest SIMD register
inline constexpr size_t kHugePageBytes = 2u << 20;     // x86-64 and aarch64 (4 KiB granule)
inline constexpr size_t kHugePageMinBytes = 4u << 20;  // smaller buffers keep 4 KiB pages

// What large buffers get: "madvise" (advised, the kernel allows THP), "off"
// (TOKAMAX_HUGE_PAGES=0), "unavailable" (no THP: transparent_hugepage is "never" or absent).
// Decided once per process.
const std::string& huge_pages_mode();

// Whether a TOKAMAX_HUGE_PAGES value turns huge pages off, and whether it is a value at all.
bool huge_pages_env_off(std::string_view value);
bool huge_pages_env_valid(std::string_view value);

// Pure: the mode for a TOKAMAX_HUGE_PAGES value (nullptr when unset) and the content of
// /sys/kernel/mm/transparent_hugepage/enabled ("" when absent), e.g. "always [madvise] never".
std::string huge_pages_mode_for(const char* env_value, const std::string& thp_enabled);

// At least `bytes` bytes (0 allowed), kHostAlignment aligned; 2 MiB aligned and advised for huge
// pages when bytes >= kHugePageMinBytes and the mode is "madvise". Not zeroed. Throws
// std::bad_alloc. Free with free_host.
void* allocate_host(size_t bytes);
void free_host(void* p);

// allocate_host as a standard allocator, for containers that hold large kernel buffers (the
// GEMM engine's packed operands): std::vector<float, HostAllocator<float>>.
template <typename T>
struct HostAllocator {
  using value_type = T;
  HostAllocator() = default;
  template <typename U>
  HostAllocator(const HostAllocator<U>&) {}  // NOLINT: rebinding is implicit for allocators
  T* allocate(size_t n) { return static_cast<T*>(allocate_host(n * sizeof(T))); }
  void deallocate(T* p, size_t) { free_host(p); }
  friend bool operator==(const HostAllocator&, const HostAllocator&) { return true; }
};

}  // namespace tokamax::cpu
