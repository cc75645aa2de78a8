// CPU detection: ISA features, cores, cache sizes -> DeviceInfo.
#pragma once

#include "ops/device.h"

namespace tokamax::cpu {

// Detects the host CPU once (cached); cheap to call repeatedly.
const DeviceInfo& host_device();

// Parses /proc/cpuinfo-style text and cache sizes into a DeviceInfo (exposed for tests).
DeviceInfo describe_cpu(const std::string& cpuinfo_text, int cores, int64_t l1d_bytes,
                        int64_t l2_bytes, int64_t l3_bytes);

}  // namespace tokamax::cpu
