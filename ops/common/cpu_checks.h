// Config checks shared by the CPU implementations, and the oneMKL baselines' availability.
#pragma once

#include <string>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/mkl_loader.h"
#include "ops/framework/config.h"
#include "ops/framework/errors.h"
#include "ops/framework/op.h"

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

// supported_on of an `mkl` baseline: `support` (the device's answer), unless oneMKL cannot load.
inline Support mkl_support(Support support) {
  if (support.ok && cpu::mkl() == nullptr) return {false, cpu::mkl_error()};
  return support;
}

// The process's oneMKL for an `mkl` baseline; NotImplemented with the loader's reason without it.
inline const cpu::Mkl& require_mkl() {
  const cpu::Mkl* mkl = cpu::mkl();
  if (mkl == nullptr) throw NotImplemented("mkl: " + cpu::mkl_error());
  return *mkl;
}

}  // namespace tokamax
