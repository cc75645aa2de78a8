// Shared test helper: run a check with Highway's run-time dispatch forced to narrower targets.
#pragma once

#include <hwy/targets.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <initializer_list>

namespace tokamax::testing {

// Runs body(target) once per target in `targets` that this CPU supports, with Highway's dispatch
// forced to it, so that the AVX2 and scalar kernels run on an AVX-512 machine too; an unsupported
// target is skipped with a warning. The normal dispatch comes back at the end, also when a
// REQUIRE fails inside. HWY_SCALAR stands for the build's portable fallback (SCALAR or EMU128).
template <typename Body>
void for_each_forced_target(std::initializer_list<int64_t> targets, Body&& body) {
  struct RestoreTargets {
    ~RestoreTargets() { hwy::SetSupportedTargetsForTest(0); }
  } restore;
  const int64_t supported = hwy::SupportedTargets();
  for (int64_t target : targets) {
    // The portable fallback is SCALAR with GCC and EMU128 with clang: HWY_SCALAR names whichever
    // this build compiled.
    if (target == HWY_SCALAR && (HWY_TARGETS & HWY_SCALAR) == 0) target = HWY_EMU128;
    if ((supported & target) == 0) {
      WARN("skipped: the CPU does not support the " << hwy::TargetName(target) << " target");
      continue;
    }
    hwy::SetSupportedTargetsForTest(target);
    INFO("forced SIMD target " << hwy::TargetName(target));
    body(target);
  }
}

}  // namespace tokamax::testing
