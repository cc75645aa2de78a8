// AMX, the matrix units of recent Intel Xeons: whether this process may use them, and how the
// engine's tile kernels run here (on the tiles, through their portable emulation, or not at all).
#pragma once

#include <string>

#include "backends/cpu/cpu_info.h"

namespace tokamax::cpu {

// What the tile kernels may use. The CPU's flags (amx_tile, amx_bf16, amx_int8, amx_fp16) say
// what the silicon has; Linux must also grant the process the tile data state
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) before the first tile instruction, or
// that instruction faults. A hypervisor may hide the units or the kernel refuse the state: then
// every unit reads unavailable and `reason` says why.
struct AmxSupport {
  bool bf16 = false;   // TDPBF16PS
  bool int8 = false;   // TDPBUSD / TDPBSSD / TDPBSUD / TDPBUUD
  bool fp16 = false;   // TDPFP16PS
  std::string reason;  // why a unit is unavailable ("" when every unit the CPU has is usable)

  bool any() const { return bf16 || int8 || fp16; }
};

// The decision from the CPU's flags and the outcome of the permission request (`permission_error`
// 0: granted; an errno value otherwise). Exposed for tests.
AmxSupport describe_amx(const CpuInfo& cpu, int permission_error);

// The host's: the permission is requested once per process, on first call, and only where the
// CPU's flags list amx_tile.
const AmxSupport& host_amx();

// How the engine's AMX kernels run in this process.
enum class TileMode {
  kNone,      // not at all: a config that asks for AMX is refused
  kHardware,  // on the matrix units (host_amx() allows it)
  kEmulated,  // the portable emulation (backends/cpu/amx_tiles.h): same results, slow
};

// kHardware where the host's units are usable; else kEmulated when the environment sets
// TOKAMAX_AMX=emulate (to run the AMX paths on any CPU, as the tests do); else kNone. The
// variable is read once; set_tile_mode_for_test overrides the answer for the whole process.
TileMode tile_mode();
// "hardware", "emulated" or "none".
const char* tile_mode_name(TileMode mode);
// Forces `mode` for the whole process until the next call (tests restore what tile_mode()
// returned before). kHardware only where the host's units are usable: std::logic_error otherwise.
void set_tile_mode_for_test(TileMode mode);

}  // namespace tokamax::cpu
