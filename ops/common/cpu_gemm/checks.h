// What a config of a CPU GEMM client (ragged_dot, gated_linear_unit, attention, the fused
// cross-entropy) must satisfy on this CPU: a micro-tile its kernels have, the native bf16 path.
#pragma once

#include <algorithm>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/simd_target.h"
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

// The engine a client config's bf16_path names: "convert_f32" (f32 FMAs), "native_dot"
// (vdpbf16ps), "amx" (AMX tiles). Configs are validated before this is asked.
inline GemmEngine gemm_engine(const std::string& bf16_path) {
  if (bf16_path == "native_dot") return GemmEngine::kBf16Dot;
  if (bf16_path == "amx") return GemmEngine::kAmxBf16;
  return GemmEngine::kF32Fma;
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

// bf16_path=native_dot (field "bf16_path"): the problem's dtypes allow it (`problem_ok`, else
// "native_dot needs <needs>") and this CPU has the instruction.
inline void require_native_bf16(bool problem_ok, const char* needs) {
  require_config(problem_ok, "bf16_path", [&] { return std::string("native_dot needs ") + needs; });
  require_config(gemm_has_native_bf16(), "bf16_path",
                 "native_dot needs a CPU with avx512_bf16 (and AVX-512 kernels)");
}

}  // namespace tokamax
