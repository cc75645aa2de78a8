// Tests of backends/cpu/denormals.h: a denormal product flushes to zero inside the scope and not
// after it.
#include "backends/cpu/denormals.h"

#include <catch2/catch.hpp>
#include <cfloat>

TEST_CASE("ScopedFlushDenormals flushes denormals only within its scope", "[denormals]") {
  volatile float tiny = FLT_MIN;  // the smallest normal f32
  volatile float half = 0.5f;
  const float before = tiny * half;  // a denormal
  CHECK(before > 0.0f);
  {
    const tokamax::cpu::ScopedFlushDenormals flush;
    const float inside = tiny * half;
#if defined(__x86_64__) || defined(__i386__)
    CHECK(inside == 0.0f);
#else
    CHECK(inside > 0.0f);
#endif
  }
  const float after = tiny * half;
  CHECK(after == before);
}
