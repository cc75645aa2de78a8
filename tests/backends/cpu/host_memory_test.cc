// Tests for host buffers: alignment, the huge-page mode and the advice on large buffers.
#include "backends/cpu/host_memory.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

using tokamax::cpu::allocate_host;
using tokamax::cpu::free_host;
using tokamax::cpu::huge_pages_mode;
using tokamax::cpu::huge_pages_mode_for;
using tokamax::cpu::kHostAlignment;
using tokamax::cpu::kHugePageBytes;
using tokamax::cpu::kHugePageMinBytes;

namespace {

// The VmFlags of the mapping that holds p in /proc/self/smaps ("" when not found).
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= address && address < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

}  // namespace

TEST_CASE("huge_pages_mode_for reads the bracketed THP setting and the environment",
          "[host_memory]") {
  CHECK(huge_pages_mode_for(nullptr, "always [madvise] never\n") == "madvise");
  CHECK(huge_pages_mode_for(nullptr, "[always] madvise never\n") == "madvise");
  CHECK(huge_pages_mode_for(nullptr, "always madvise [never]\n") == "unavailable");
  CHECK(huge_pages_mode_for(nullptr, "") == "unavailable");
  CHECK(huge_pages_mode_for("0", "always [madvise] never\n") == "off");
  CHECK(huge_pages_mode_for("off", "always [madvise] never\n") == "off");
  CHECK(huge_pages_mode_for("no", "[always] madvise never\n") == "off");
  CHECK(huge_pages_mode_for("false", "always [madvise] never\n") == "off");
  CHECK(huge_pages_mode_for("yes", "always [madvise] never\n") == "madvise");
  CHECK(tokamax::cpu::huge_pages_env_valid("on"));
  CHECK_FALSE(tokamax::cpu::huge_pages_env_valid("maybe"));
  CHECK_FALSE(tokamax::cpu::huge_pages_env_valid(""));
  CHECK(huge_pages_mode_for("1", "always [madvise] never\n") == "madvise");
  CHECK(huge_pages_mode_for("1", "always madvise [never]\n") == "unavailable");
}

TEST_CASE("allocate_host aligns small buffers to a line and large ones to a huge page",
          "[host_memory]") {
  for (const size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{4096}}) {
    void* p = allocate_host(bytes);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % kHostAlignment == 0);
    std::memset(p, 1, bytes);
    free_host(p);
  }
  const size_t large = kHugePageMinBytes + 12345;
  char* p = static_cast<char*>(allocate_host(large));
  REQUIRE(p != nullptr);
  std::memset(p, 1, large);  // the whole range is writable
  CHECK(p[large - 1] == 1);
  if (huge_pages_mode() == "madvise") {
    CHECK(reinterpret_cast<uintptr_t>(p) % kHugePageBytes == 0);
    // The advice is on the mapping: smaps lists MADV_HUGEPAGE as the "hg" flag.
    const std::string flags = vm_flags_of(p);
    INFO(flags);
    CHECK(flags.find(" hg") != std::string::npos);
  } else {
    CHECK(reinterpret_cast<uintptr_t>(p) % kHostAlignment == 0);
  }
  free_host(p);
}
