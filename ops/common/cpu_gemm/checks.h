// What a config of a CPU GEMM client (ragged_dot, gated_linear_unit, attention, the fused
// cross-entropy) must satisfy on this CPU: a micro-tile its kernels have, a bf16 engine it can
// run; and the one choice of bf16 engine every client's heuristics and search space make.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cpu/amx.h"
#include "backends/cpu/cpu_device.h"
#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_gemm/amx_layout.h"
#include "ops/common/cpu_gemm/gemm.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/framework/config.h"

namespace tokamax {

// f32 lanes of the GEMM kernels that will run on `cpu`: the dispatched Highway target on this
// host, the widest vector its ISA list promises for another CPU (a config resolved for it).
inline int kernel_f32_lanes(const cpu::CpuInfo& cpu) {
  if (cpu.id == cpu::host_cpu().id) return cpu::simd_f32_lanes();
  return std::max(1, cpu.simd_bytes / 4);
}

// Whether bf16_path=native_dot can run on `cpu` (avx512_bf16 with AVX-512 kernels).
inline bool kernel_has_native_bf16(const cpu::CpuInfo& cpu) {
  return cpu.has("avx512_bf16") && kernel_f32_lanes(cpu) >= 16;
}

// bf16_path, the engine of a client's bf16 x bf16 products (GemmEngine):
//   "convert_f32"  bf16 widened to f32, f32 FMAs: every CPU
//   "native_dot"   vdpbf16ps on bf16 pairs: avx512_bf16 with AVX-512 kernels
//   "amx"          TDPBF16PS on AMX tiles: amx_bf16 that Linux lets the process use, or the
//                  tiles' emulation (TOKAMAX_AMX=emulate; backends/cpu/amx.h)
inline GemmEngine gemm_engine(const std::string& bf16_path) {
  if (bf16_path == "native_dot") return GemmEngine::kBf16Dot;
  if (bf16_path == "amx") return GemmEngine::kAmxBf16;
  return GemmEngine::kF32Fma;
}

// validate(): bf16_path names an engine (field "bf16_path").
inline void require_bf16_path_name(const std::string& bf16_path) {
  require_config(bf16_path == "convert_f32" || bf16_path == "native_dot" || bf16_path == "amx",
                 "bf16_path", [&] {
                   return "bf16_path is '" + bf16_path +
                          "'; expected 'convert_f32', 'native_dot' or 'amx'";
                 });
}

// Whether bf16_path=amx can run for `cpu`: this host's tiles or their emulation; a described
// CPU of another machine that lists amx_bf16.
inline bool kernel_has_amx_bf16(const cpu::CpuInfo& cpu) {
  if (cpu.id == cpu::host_cpu().id) return gemm_has_amx_bf16();
  return cpu.has("amx_bf16");
}

// The same for int8 x int8 products (TDPBUSD).
inline bool kernel_has_amx_int8(const cpu::CpuInfo& cpu) {
  if (cpu.id == cpu::host_cpu().id) return gemm_has_amx_int8();
  return cpu.has("amx_int8");
}

// Whether the AMX bf16 tiles (with `int8`: the int8 ones) would run on the hardware for `cpu`,
// not the slow emulation.
inline bool amx_on_hardware(const cpu::CpuInfo& cpu, bool int8 = false) {
  if (cpu.id == cpu::host_cpu().id) {
    const cpu::AmxSupport& amx = cpu::host_amx();
    return cpu::tile_mode() == cpu::TileMode::kHardware && (int8 ? amx.int8 : amx.bf16);
  }
  return cpu.has(int8 ? "amx_int8" : "amx_bf16");
}

// Whether vdpbf16ps out-runs f32 FMAs on `cpu`. It does two multiply-adds per f32 lane, at the
// FMA's issue rate on AMD's cores (twice the f32 flops) but at half of it on Intel's cores,
// where widening to f32 is the faster of the two (docs/amx.md has the measurements).
inline bool native_bf16_outruns_fma(const cpu::CpuInfo& cpu) {
  return kernel_has_native_bf16(cpu) && cpu.vendor != "GenuineIntel";
}

// check_config(): bf16_path can run here. Another path than convert_f32 needs the problem's
// dtypes to allow it (`problem_ok`, else "<path> needs <needs>") and this CPU's engine.
inline void require_bf16_path(const std::string& bf16_path, bool problem_ok, const char* needs) {
  if (bf16_path == "convert_f32") return;
  require_config(problem_ok, "bf16_path", [&] { return bf16_path + " needs " + needs; });
  if (bf16_path == "amx") {
    require_config(gemm_has_amx_bf16(), "bf16_path", [] {
      return "amx needs a CPU with amx_bf16 whose tiles Linux grants (" + cpu::host_amx().reason +
             "), or TOKAMAX_AMX=emulate";
    });
    return;
  }
  require_config(gemm_has_native_bf16(), "bf16_path",
                 "native_dot needs a CPU with avx512_bf16 (and AVX-512 kernels)");
}

// The bf16 paths of a search space for `cpu` (a problem whose dtypes allow them): convert_f32,
// native_dot where the CPU has it, amx where it has the tiles (or runs them emulated).
inline std::vector<std::string> bf16_paths_for(const cpu::CpuInfo& cpu) {
  std::vector<std::string> paths = {"convert_f32"};
  if (kernel_has_native_bf16(cpu)) paths.push_back("native_dot");
  if (kernel_has_amx_bf16(cpu)) paths.push_back("amx");
  return paths;
}

// The heuristics' bf16 path for `cpu`: the tiles where they run on the hardware, else vdpbf16ps
// where it out-runs f32 FMAs, else convert_f32.
inline std::string fastest_bf16_path(const cpu::CpuInfo& cpu) {
  if (amx_on_hardware(cpu)) return "amx";
  if (native_bf16_outruns_fma(cpu)) return "native_dot";
  return "convert_f32";
}

// An mr x nr micro-tile (field "mr") that this CPU's GEMM micro-kernels have.
inline void require_micro_tile(int mr, int nr) {
  const int lanes = cpu::simd_f32_lanes();
  require_config(nr % lanes == 0 && has_micro_kernel_shape(lanes, mr, nr / lanes), "mr", [&] {
    std::string shapes;
    for (const MicroKernelShape& s : micro_kernel_shapes(lanes)) {
      shapes += (shapes.empty() ? "" : ", ") + std::to_string(s.mr) + "x" +
                std::to_string(s.nr_vectors * lanes);
    }
    return "no " + std::to_string(mr) + "x" + std::to_string(nr) +
           " micro-kernel (mr x nr) for this CPU's " + cpu::simd_target_name() +
           " target; it has " + shapes;
  });
}

}  // namespace tokamax
