// CPU detection: ISA features, cores, cache sizes -> DeviceInfo.
#pragma once

#include <cstdint>
#include <string>

#include "backends/device.h"

namespace tokamax::cpu {

// Detects the host CPU once (cached); cheap to call repeatedly.
const DeviceInfo& host_device();

// Parses /proc/cpuinfo-style text and cache sizes into a DeviceInfo (exposed for tests).
DeviceInfo describe_cpu(const std::string& cpuinfo_text, int cores, int64_t l1d_bytes,
                        int64_t l2_bytes, int64_t l3_bytes);

// The last-level cache (what cold-cache benchmarking must overflow): its size and where the
// figure came from: "sysfs" (/sys/devices/system/cpu/cpu0/cache/index*, L3 else L2, as
// host_device() reads them), "sysconf" (_SC_LEVEL3_CACHE_SIZE, else _SC_LEVEL2_CACHE_SIZE), or
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
