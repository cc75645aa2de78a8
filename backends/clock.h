// The one wall clock: seconds on a monotonic clock, and the Timer of devices whose kernels
// return when they are done (the CPU).
#pragma once

#include <chrono>

#include "backends/device.h"

namespace tokamax {

// Seconds since an arbitrary fixed point (std::chrono::steady_clock): for differences only.
inline double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The steady clock's tick as it behaves here: the smallest positive difference of consecutive
// readings (the clock's nominal period says nothing of a virtual machine's clock source).
double wall_clock_resolution_s();

class WallTimer final : public Timer {
 public:
  void start() override { start_ = wall_seconds(); }
  double stop() override { return wall_seconds() - start_; }
  double resolution_s() const override { return wall_clock_resolution_s(); }

 private:
  double start_ = 0;
};

}  // namespace tokamax
