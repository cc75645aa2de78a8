// The wall clock's resolution, measured once.
#include "backends/clock.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tokamax {

double wall_clock_resolution_s() {
  static const double resolution = [] {
    double smallest = std::numeric_limits<double>::infinity();
    // A few thousand readings: enough for the clock to tick many times, about a millisecond.
    double last = wall_seconds();
    for (int i = 0; i < 4096; ++i) {
      const double now = wall_seconds();
      if (now > last) smallest = std::min(smallest, now - last);
      last = now;
    }
    return std::isfinite(smallest) ? smallest : 0.0;
  }();
  return resolution;
}

}  // namespace tokamax
