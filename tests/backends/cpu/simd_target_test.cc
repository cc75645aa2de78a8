// Tests for the one SIMD-target query: a name and vector widths that follow Highway's dispatch.
#include "backends/cpu/simd_target.h"

#include <hwy/targets.h>

#include <catch2/catch.hpp>
#include <string>

#include "tests/simd_targets.h"

using namespace tokamax;

TEST_CASE("the SIMD target query names the dispatched target and its widths", "[simd]") {
  CHECK_FALSE(std::string(cpu::simd_target_name()).empty());
  CHECK(cpu::simd_f32_lanes() >= 1);
  CHECK(cpu::simd_f32_lanes() >= cpu::simd_f64_lanes());
  // Forcing a narrower target changes the answer for every kernel at once.
  testing::for_each_forced_target({HWY_AVX2}, [](int64_t target) {
    CHECK(std::string(cpu::simd_target_name()) == hwy::TargetName(target));
    CHECK(cpu::simd_f32_lanes() == 8);
    CHECK(cpu::simd_f64_lanes() == 4);
  });
}
