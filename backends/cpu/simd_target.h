// The SIMD target Highway's run-time dispatch picks on this CPU: one query for every kernel.
//
// Every Highway translation unit of the library is compiled for the same target list (CMake sets
// HWY_DISABLED_TARGETS once for all of them), and dispatch picks one target for the whole
// process (tests may force a narrower one with hwy::SetSupportedTargetsForTest), so the answer
// holds for every kernel: the micro-kernel shapes, the padding of layer_norm's parameters, the
// target names records carry.
#pragma once

namespace tokamax::cpu {

// "AVX3_SPR", "AVX3", "AVX2", "EMU128", ...: the dispatched target right now.
const char* simd_target_name();
// Lanes of one vector of f32 and f64 on that target (AVX-512: 16 and 8, AVX2: 8 and 4).
int simd_f32_lanes();
int simd_f64_lanes();

}  // namespace tokamax::cpu
