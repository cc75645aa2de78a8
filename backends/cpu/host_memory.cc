// Host buffers for tensors and bandwidth probes (see host_memory.h).
#include "backends/cpu/host_memory.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tokamax::cpu {
namespace {

size_t round_up(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

std::string read_thp_setting() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::stringstream text;
  text << in.rdbuf();
  return in ? text.str() : std::string();
}

}  // namespace

bool huge_pages_env_off(std::string_view value) {
  return value == "0" || value == "off" || value == "false" || value == "no";
}

bool huge_pages_env_valid(std::string_view value) {
  return huge_pages_env_off(value) || value == "1" || value == "on" || value == "true" ||
         value == "yes";
}

std::string huge_pages_mode_for(const char* env_value, const std::string& thp_enabled) {
  if (env_value != nullptr && huge_pages_env_off(env_value)) return "off";
  // The active setting is the bracketed one: "always [madvise] never".
  const bool thp = thp_enabled.find("[always]") != std::string::npos ||
                   thp_enabled.find("[madvise]") != std::string::npos;
  return thp ? "madvise" : "unavailable";
}

const std::string& huge_pages_mode() {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  static const std::string mode = [] {
    const char* env = std::getenv("TOKAMAX_HUGE_PAGES");
    if (env != nullptr && !huge_pages_env_valid(env)) {
      std::fprintf(stderr,
                   "tokamax: warning: TOKAMAX_HUGE_PAGES='%s' is not 0/off/false/no or "
                   "1/on/true/yes; using huge pages\n",
                   env);
    }
    return huge_pages_mode_for(env, read_thp_setting());
  }();
#else
  static const std::string mode = "unavailable";
#endif
  return mode;
}

void* allocate_host(size_t bytes) {
  const bool huge = bytes >= kHugePageMinBytes && huge_pages_mode() == "madvise";
  const size_t alignment = huge ? kHugePageBytes : kHostAlignment;
  // aligned_alloc wants a multiple of the alignment; never 0 bytes.
  const size_t rounded = round_up(bytes > 0 ? bytes : 1, alignment);
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Advice only: a kernel without free huge pages backs the range with 4 KiB pages.
  if (huge) madvise(p, rounded, MADV_HUGEPAGE);
#endif
  return p;
}

void free_host(void* p) { std::free(p); }

}  // namespace tokamax::cpu

namespace tokamax {
namespace {

// Host memory through allocate_host: the Memory of the CPU device and of generated inputs.
class HostMemory final : public Memory {
 public:
  std::string_view name() const override { return "host"; }
  bool host_accessible() const override { return true; }
  void* allocate(size_t bytes) const override { return cpu::allocate_host(bytes); }
  void free(void* p) const override { cpu::free_host(p); }
  void zero(void* p, size_t bytes) const override {
    if (bytes > 0) std::memset(p, 0, bytes);
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) const override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) const override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
};

}  // namespace

const Memory& host_memory() {
  static const HostMemory memory;
  return memory;
}

}  // namespace tokamax
