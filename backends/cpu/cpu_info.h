// CPU detection: ISA features, cores, cache sizes -> CpuInfo.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tokamax::cpu {

// What CPU kernels and their heuristics need to know about a CPU.
struct CpuInfo {
  std::string vendor;            // "GenuineIntel", "AuthenticAMD", ...
  std::string model;             // marketing name as reported by the OS
  std::string arch;              // "x86_64", "aarch64"
  std::vector<std::string> isa;  // "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "neon", ...
  int cores = 1;                 // usable hardware threads (affinity mask)
  int64_t l1d_bytes = 0;         // per core
  int64_t l2_bytes = 0;          // per core
  int64_t l3_bytes = 0;          // total
  int simd_bytes = 16;           // widest vector register the ISA offers
  // Stable id: lowercase [a-z0-9_-], from vendor, family/model, widest ISA and core count; used as
  // the folder name of the shipped cache (results/autotuning/<id>/).
  std::string id;

  bool has(const std::string& feature) const;
  std::string description() const;  // one line for tables and records

  // The cache sizes tiles are sized from. Where the OS reports none (some containers and VMs):
  // the smallest L1d and L2 of current server cores, so that tiles err on the side of fitting.
  int64_t tile_l1d_bytes() const { return l1d_bytes > 0 ? l1d_bytes : int64_t{32} << 10; }
  int64_t tile_l2_bytes() const { return l2_bytes > 0 ? l2_bytes : int64_t{256} << 10; }
};

// Detects the host CPU once (cached); cheap to call repeatedly.
const CpuInfo& host_cpu();

// Parses /proc/cpuinfo-style text and cache sizes into a CpuInfo (exposed for tests).
CpuInfo describe_cpu(const std::string& cpuinfo_text, int cores, int64_t l1d_bytes,
                     int64_t l2_bytes, int64_t l3_bytes);

// The last-level cache (what cold-cache benchmarking must overflow): its size and where the
// figure came from: "sysfs" (/sys/devices/system/cpu/cpu0/cache/index*, L3 else L2, as
// host_cpu() reads them), "sysconf" (_SC_LEVEL3_CACHE_SIZE, else _SC_LEVEL2_CACHE_SIZE), or
// "fallback" (kFallbackLlcBytes) when neither reports a size.
struct LastLevelCache {
  int64_t bytes = 0;
  std::string source;
};
inline constexpr int64_t kFallbackLlcBytes = int64_t{32} << 20;
// The choice among the candidate figures (0 or negative: not reported); exposed for tests.
LastLevelCache pick_last_level_cache(int64_t sysfs_l3, int64_t sysfs_l2, int64_t sysconf_l3,
                                     int64_t sysconf_l2);
// The host's, queried once (cached).
const LastLevelCache& last_level_cache();

}  // namespace tokamax::cpu
