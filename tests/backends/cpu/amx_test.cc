// Tests for AMX availability: the decision from flags and Linux's answer, and the tile mode.
#include "backends/cpu/amx.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <stdexcept>

#include "tests/tile_modes.h"

using namespace tokamax;

namespace {

cpu::CpuInfo cpu_with(std::vector<std::string> isa) {
  cpu::CpuInfo cpu;
  cpu.isa = std::move(isa);
  return cpu;
}

}  // namespace

TEST_CASE("AMX units are usable only where the CPU lists them and Linux grants the tiles",
          "[amx]") {
  const cpu::AmxSupport none = cpu::describe_amx(cpu_with({"avx512f", "avx512_bf16"}), 0);
  CHECK_FALSE(none.any());
  CHECK_THAT(none.reason, Catch::Contains("amx_tile"));

  const cpu::CpuInfo sapphire = cpu_with({"avx512f", "amx_tile", "amx_bf16", "amx_int8"});
  const cpu::AmxSupport granted = cpu::describe_amx(sapphire, 0);
  CHECK(granted.bf16);
  CHECK(granted.int8);
  CHECK_FALSE(granted.fp16);
  CHECK(granted.reason.empty());
  CHECK(cpu::describe_amx(cpu_with({"amx_tile", "amx_bf16", "amx_int8", "amx_fp16"}), 0).fp16);

  // An older kernel (no ARCH_REQ_XCOMP_PERM: EINVAL) or a sandbox that forbids it: unavailable,
  // with the reason, never a fault at the first tile instruction.
  for (int error : {EINVAL, EPERM}) {
    const cpu::AmxSupport refused = cpu::describe_amx(sapphire, error);
    CHECK_FALSE(refused.any());
    CHECK_THAT(refused.reason, Catch::Contains("arch_prctl"));
  }
  const cpu::AmxSupport no_units = cpu::describe_amx(cpu_with({"amx_tile"}), 0);
  CHECK_FALSE(no_units.any());
  CHECK_FALSE(no_units.reason.empty());
}

TEST_CASE("the tile mode is the hardware exactly where the host's units are usable", "[amx]") {
  const cpu::AmxSupport& host = cpu::host_amx();
  INFO("host AMX: " << (host.any() ? "usable" : host.reason));
  if (host.any()) {
    CHECK(cpu::tile_mode() == cpu::TileMode::kHardware);
  } else {
    CHECK(cpu::tile_mode() != cpu::TileMode::kHardware);
    CHECK_THROWS_AS(cpu::set_tile_mode_for_test(cpu::TileMode::kHardware), std::logic_error);
  }
  {
    testing::ScopedTileMode emulated(cpu::TileMode::kEmulated);
    CHECK(cpu::tile_mode() == cpu::TileMode::kEmulated);
    CHECK(std::string(cpu::tile_mode_name(cpu::tile_mode())) == "emulated");
  }
  CHECK((cpu::tile_mode() == cpu::TileMode::kHardware) == host.any());
}
