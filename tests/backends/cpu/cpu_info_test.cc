// Tests for CPU detection: ISA parsing from /proc/cpuinfo text, the device id, the host.
#include "backends/cpu/cpu_info.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

using namespace tokamax;

namespace {

bool filesystem_safe(const std::string& id) {
  if (id.empty()) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

const char* kSapphireRapids =
    "processor\t: 0\n"
    "vendor_id\t: GenuineIntel\n"
    "cpu family\t: 6\n"
    "model\t\t: 143\n"
    "model name\t: Intel(R) Xeon(R) Platinum 8480+\n"
    "flags\t\t: fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 avx512f avx512dq "
    "avx512bw avx512vl avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8\n"
    "\n"
    "processor\t: 1\n"
    "vendor_id\t: GenuineIntel\n";

}  // namespace

TEST_CASE("describe_cpu parses ISA features and builds a filesystem-safe id", "[cpu_info]") {
  const cpu::CpuInfo device = cpu::describe_cpu(kSapphireRapids, 16, 48 << 10, 2 << 20, 105 << 20);
  CHECK(device.vendor == "GenuineIntel");
  CHECK(device.model == "Intel(R) Xeon(R) Platinum 8480+");
  // The fixed order of cpu_info.cc, independent of the order in the flags line.
  CHECK(device.isa == std::vector<std::string>{"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f",
                                               "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16",
                                               "amx_tile", "amx_bf16", "amx_int8"});
  CHECK(device.simd_bytes == 64);
  CHECK(device.cores == 16);
  CHECK(device.l1d_bytes == 48 << 10);
  CHECK(device.l2_bytes == 2 << 20);
  CHECK(device.id == "cpu-intel-fam6-mod143-avx512bf16-16c");
  CHECK(filesystem_safe(device.id));

  const cpu::CpuInfo arm = cpu::describe_cpu(
      "processor\t: 0\nFeatures\t: fp asimd evtstrm aes sve\nCPU implementer\t: 0x41\n", 4, 0, 0,
      0);
  CHECK(arm.isa == std::vector<std::string>{"neon", "sve"});
  CHECK(arm.simd_bytes == 16);
  CHECK(filesystem_safe(arm.id));

  const cpu::CpuInfo odd =
      cpu::describe_cpu("vendor_id : Weird Vendor/Inc. (TM)\nflags : avx2\n", 2, 0, 0, 0);
  CHECK(odd.isa == std::vector<std::string>{"avx2"});
  CHECK(filesystem_safe(odd.id));

  const cpu::CpuInfo empty = cpu::describe_cpu("", 1, 0, 0, 0);
  CHECK(empty.isa.empty());
  CHECK(filesystem_safe(empty.id));
}

TEST_CASE("host_cpu describes this machine", "[cpu_info]") {
  const cpu::CpuInfo& host = cpu::host_cpu();
  CHECK(host.cores >= 1);
  CHECK(filesystem_safe(host.id));
  CHECK(&host == &cpu::host_cpu());  // detected once
}

TEST_CASE("the last-level cache size comes from sysfs, else sysconf, else a fallback",
          "[measure]") {
  using tokamax::cpu::pick_last_level_cache;
  const int64_t mib = 1 << 20;
  CHECK(pick_last_level_cache(32 * mib, mib, 384 * mib, mib).bytes == 32 * mib);
  CHECK(pick_last_level_cache(32 * mib, mib, 384 * mib, mib).source == "sysfs");
  CHECK(pick_last_level_cache(0, 2 * mib, 0, 0).bytes == 2 * mib);  // no L3: L2 is the last
  CHECK(pick_last_level_cache(0, 0, 16 * mib, mib).source == "sysconf");
  CHECK(pick_last_level_cache(0, 0, 16 * mib, mib).bytes == 16 * mib);
  CHECK(pick_last_level_cache(0, 0, 0, mib).bytes == mib);
  CHECK(pick_last_level_cache(0, 0, -1, 0).source == "fallback");
  CHECK(pick_last_level_cache(0, 0, -1, 0).bytes == tokamax::cpu::kFallbackLlcBytes);

  // The host: positive on any system; on Linux with sysfs cache descriptions, sysfs's figure.
  const tokamax::cpu::LastLevelCache& host = tokamax::cpu::last_level_cache();
  INFO(host.source << " " << host.bytes);
  CHECK(host.bytes > 0);
  CHECK((host.source == "sysfs" || host.source == "sysconf" || host.source == "fallback"));
#if defined(__linux__)
  if (std::ifstream("/sys/devices/system/cpu/cpu0/cache/index0/size").good()) {
    CHECK(host.source == "sysfs");
    const tokamax::cpu::CpuInfo& device = tokamax::cpu::host_cpu();
    CHECK(host.bytes == (device.l3_bytes > 0 ? device.l3_bytes : device.l2_bytes));
  }
#endif
}
