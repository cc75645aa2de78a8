// AMX availability: the CPU's flags, Linux's permission for the tile data state, the tile mode.
#include "backends/cpu/amx.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tokamax::cpu {
namespace {

// Linux's arch_prctl request and the XSAVE feature number of the tile data (asm/prctl.h; the
// constants are fixed by the kernel ABI, spelled here for C libraries whose headers lack them).
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

// 0 when the process may use the tile data state, else the errno of the refusal.
int request_tile_permission() {
#if defined(__linux__) && defined(__x86_64__)
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) return 0;
  return errno != 0 ? errno : EPERM;
#else
  return ENOSYS;
#endif
}

// -1: follow tile_mode()'s own answer; otherwise a TileMode forced by a test.
std::atomic<int> g_forced_mode{-1};

}  // namespace

AmxSupport describe_amx(const CpuInfo& cpu, int permission_error) {
  AmxSupport support;
  if (!cpu.has("amx_tile")) {
    support.reason = "the CPU reports no AMX tiles (amx_tile)";
    return support;
  }
  if (permission_error != 0) {
    support.reason = std::string(
                         "Linux refused the tile data state (arch_prctl "
                         "ARCH_REQ_XCOMP_PERM: ") +
                     std::strerror(permission_error) + ")";
    return support;
  }
  support.bf16 = cpu.has("amx_bf16");
  support.int8 = cpu.has("amx_int8");
  support.fp16 = cpu.has("amx_fp16");
  if (!support.any()) support.reason = "the CPU has AMX tiles but none of the units (bf16, int8)";
  return support;
}

const AmxSupport& host_amx() {
  static const AmxSupport support = [] {
    const CpuInfo& cpu = host_cpu();
    // Ask only where there is something to grant: the request fails on other CPUs anyway.
    return describe_amx(cpu, cpu.has("amx_tile") ? request_tile_permission() : 0);
  }();
  return support;
}

TileMode tile_mode() {
  const int forced = g_forced_mode.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<TileMode>(forced);
  static const TileMode mode = [] {
    if (host_amx().bf16 || host_amx().int8) return TileMode::kHardware;
    const char* wanted = std::getenv("TOKAMAX_AMX");
    if (wanted != nullptr && std::string(wanted) == "emulate") return TileMode::kEmulated;
    return TileMode::kNone;
  }();
  return mode;
}

const char* tile_mode_name(TileMode mode) {
  switch (mode) {
    case TileMode::kHardware:
      return "hardware";
    case TileMode::kEmulated:
      return "emulated";
    case TileMode::kNone:
      break;
  }
  return "none";
}

void set_tile_mode_for_test(TileMode mode) {
  if (mode == TileMode::kHardware && !(host_amx().bf16 || host_amx().int8)) {
    throw std::logic_error("cannot force AMX tiles on the hardware: " + host_amx().reason);
  }
  g_forced_mode.store(static_cast<int>(mode), std::memory_order_relaxed);
}

}  // namespace tokamax::cpu
