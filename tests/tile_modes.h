// Shared test helper: run a check once per way the AMX tile kernels can run on this machine.
#pragma once

#include <catch2/catch.hpp>

#include "backends/cpu/amx.h"

namespace tokamax::testing {

// Runs body(mode) with the process's tile mode forced to the emulation, and then to the hardware
// tiles where the CPU and Linux allow them (else a warning says why they did not run), so every
// AMX kernel is checked on every machine and on the real units where there are some. The
// process's own mode comes back at the end, also when a REQUIRE fails inside.
template <typename Body>
void for_each_tile_mode(Body&& body) {
  struct Restore {
    cpu::TileMode saved = cpu::tile_mode();
    ~Restore() { cpu::set_tile_mode_for_test(saved); }
  } restore;
  for (cpu::TileMode mode : {cpu::TileMode::kEmulated, cpu::TileMode::kHardware}) {
    if (mode == cpu::TileMode::kHardware && !cpu::host_amx().any()) {
      WARN("AMX tiles not run on the hardware: " << cpu::host_amx().reason
                                                 << "; the emulation ran every AMX case");
      continue;
    }
    cpu::set_tile_mode_for_test(mode);
    INFO("AMX tile mode " << cpu::tile_mode_name(mode));
    body(mode);
  }
}

// Forces `mode` for one scope.
struct ScopedTileMode {
  explicit ScopedTileMode(cpu::TileMode mode) { cpu::set_tile_mode_for_test(mode); }
  ~ScopedTileMode() { cpu::set_tile_mode_for_test(saved); }
  ScopedTileMode(const ScopedTileMode&) = delete;
  ScopedTileMode& operator=(const ScopedTileMode&) = delete;
  cpu::TileMode saved = cpu::tile_mode();
};

}  // namespace tokamax::testing
