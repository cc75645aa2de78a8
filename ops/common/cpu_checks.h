// Config checks shared by the CPU implementations.
#pragma once

#include <string>

#include "backends/cpu/cpu_device.h"
#include "ops/framework/config.h"

namespace tokamax {

// num_threads at most 4 x the device's cores (configs' validate() checks >= 0): more threads than
// the pool has are capped anyway, and far more than the cores is a typo.
inline void require_num_threads(int num_threads, const Device& device) {
  const int cores = cpu::cpu_info(device).cores;
  require_config(num_threads <= 4 * cores, "num_threads", [&] {
    return "num_threads is " + std::to_string(num_threads) + " but this machine has " +
           std::to_string(cores) + " cores (at most 4x oversubscription)";
  });
}

}  // namespace tokamax
