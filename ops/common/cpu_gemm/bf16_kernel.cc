// CPU GEMM engine: the native bf16 micro-kernel (vdpbf16ps), compiled for avx512bf16 only.
//
// Dimensions.
//   rows, cols   extents of the block one call covers (one task's rows, one panel's columns)
//   depth  K extent of the current block (<= tk); pairs = ceil(depth / 2) bf16 pairs
//   mr, nr       the micro-tile: mr rows x nr = NRV * 16 columns of f32 accumulators
//
// Not a Highway target: the instruction exists only with AVX-512 BF16, so the functions carry
// their own target attribute and the rest of the file is compiled for the baseline ISA. Callers
// check gemm_has_native_bf16() first.
#include <hwy/detect_compiler_arch.h>

#include <algorithm>
#include <cstdint>
#include <span>

#include "backends/cpu/cpu_info.h"
#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

namespace tokamax {
namespace {

#if HWY_ARCH_X86
// --- Native bf16: vdpbf16ps on pair-packed operands (AVX-512 BF16 only). -------------------
// Each instruction does 16 lanes x 2 products (k = 2i and 2i+1) into f32 accumulators, twice
// the multiply-adds of an f32 FMA; whether it is also twice as fast depends on the core (on
// AVX-512 Xeons it issues at about half the FMA rate), which is why the config offers both
// paths and the tuner measures. Compiled for avx512bf16 and called only when the CPU has it.
#define TOKAMAX_TARGET_BF16 __attribute__((target("avx512f,avx512bf16")))

// LS: the packed lhs panel's pair stride (MR, or the panel's mr for a tail tile of MR rows).
template <int MR, int NRV, int LS = MR>
TOKAMAX_TARGET_BF16 void MicroTileBf16(const uint32_t* __restrict lhs,  // [pairs][LS]
                                       const uint32_t* __restrict rhs,  // [pairs][NRV * 16]
                                       int64_t pairs, float* __restrict out, int64_t ldc,
                                       int64_t rows, int64_t cols, bool accumulate) {
  constexpr int64_t L = 16;
  for (int64_t r = 0; r < rows; ++r) {
    for (int v = 0; v < NRV; ++v) {
      _mm_prefetch(reinterpret_cast<const char*>(out + r * ldc + v * L), _MM_HINT_T0);
    }
  }
  __m512 acc[MR][NRV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < pairs; ++i) {
    __m512bh b[NRV];
#pragma GCC unroll 4
    for (int v = 0; v < NRV; ++v) {
      b[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(rhs + i * NRV * L + v * L));
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      // One 32-bit broadcast carries (lhs[r][2i], lhs[r][2i+1]).
      const __m512bh a_r =
          reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(lhs[i * LS + r])));
#pragma GCC unroll 4
      for (int v = 0; v < NRV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a_r, b[v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (r >= rows) break;
#pragma GCC unroll 4
    for (int v = 0; v < NRV; ++v) {
      const int64_t valid = std::min<int64_t>(cols - v * L, L);
      if (valid <= 0) break;
      // All-ones for full vectors; masked lanes are neither read nor written.
      const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
      float* dst = out + r * ldc + v * L;
      __m512 sum = acc[r][v];
      if (accumulate) sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(mask, dst));
      _mm512_mask_storeu_ps(dst, mask, sum);
    }
  }
}

template <int MR, int NRV>
TOKAMAX_TARGET_BF16 void BlockProductBf16(const BlockArgs& args) {
  constexpr int64_t NR = int64_t{NRV} * 16;
  const uint32_t* lhs = static_cast<const uint32_t*>(args.lhs_block);
  const uint32_t* rhs = static_cast<const uint32_t*>(args.rhs);
  float* out = static_cast<float*>(args.out);
  const int64_t pairs = ceil_div(args.depth, 2);
  const int64_t panels = ceil_div(args.rows, MR), strips = ceil_div(args.cols, NR);
  PrefetchCursor prefetch(args.next_rhs, panels * strips);
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t rows = std::min<int64_t>(MR, args.rows - p * MR);
    for (int64_t s = 0; s < strips; ++s) {
      // The last panel of a block may be a tail: fewer accumulator rows (micro_tile.h).
      dispatch_tile_rows<MR>(rows, [&](auto tile_rows) {
        MicroTileBf16<decltype(tile_rows)::value, NRV, MR>(
            lhs + p * pairs * MR, rhs + s * pairs * NR, pairs, out + p * MR * args.ldc + s * NR,
            args.ldc, rows, std::min<int64_t>(NR, args.cols - s * NR), args.accumulate);
      });
      prefetch.step();
    }
  }
}

template <size_t I = 0>
bool RunShapeBf16(const BlockArgs& args) {
  constexpr std::span<const MicroKernelShape> shapes = micro_kernel_shapes(16);
  if constexpr (I < shapes.size()) {
    constexpr MicroKernelShape shape = shapes[I];
    if (args.mr == shape.mr && args.nr_vectors == shape.nr_vectors) {
      BlockProductBf16<shape.mr, shape.nr_vectors>(args);
      return true;
    }
    return RunShapeBf16<I + 1>(args);
  }
  return false;
}
#else
bool RunShapeBf16(const BlockArgs&) { return false; }
#endif  // HWY_ARCH_X86

}  // namespace

bool block_product_bf16(const BlockArgs& args) { return RunShapeBf16(args); }

bool gemm_has_native_bf16() {
#if HWY_ARCH_X86
  return cpu::host_cpu().has("avx512_bf16") && cpu::simd_f32_lanes() >= 16;
#else
  return false;
#endif
}

}  // namespace tokamax
