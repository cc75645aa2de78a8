// CPU GEMM engine: the register-blocked f32/f64 micro-kernels, compiled once per SIMD target.
//
// Dimensions.
//   rows, cols   extents of the block one call covers (one task's rows, one panel's columns)
//   depth  K extent of the current block (<= tk)
//   mr, nr       the micro-tile: mr rows x nr = NRV * L columns of accumulators
//   L      lanes of one vector of the accumulation type (f32: 16 on AVX-512, 8 on AVX2)
//
// The micro-kernel runs over (micro-panel, strip) pairs: mr x NRV accumulator vectors stay in
// registers for the whole depth; each k step loads NRV rhs vectors, broadcasts mr lhs values and
// issues mr * NRV FMAs, so loads per FMA are (mr + NRV) / (mr * NRV). Highway compiles this file
// once per x86 target (AVX-512, AVX2, scalar); every (mr, nr_vectors) of that target's shape
// table (micro_tile.h) is instantiated, and the dispatch picks the target at run time.
#include "ops/common/cpu_gemm/micro_kernel.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>

#include "ops/common/cpu_gemm/micro_tile.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/cpu_gemm/micro_kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "ops/common/cpu_gemm/widen-inl.h"
#include "ops/common/masked_load-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// out[rows, cols] (+)= lhs_panel[depth][MR] @ rhs_strip[depth][NRV * L], every output summing
// its k terms in k order. The MR x NRV accumulators are named by compile-time indices only, so
// the compiler keeps all of them in registers across the k loop (no spills: see the shape
// tables in micro_tile.h).
// LS is the packed lhs panel's k stride: MR for a whole panel; a tail tile (the last rows of a
// panel, fewer than its mr) runs MR < LS accumulator rows over a panel packed LS wide.
template <int MR, int NRV, class D, typename BT, int LS = MR>
HWY_INLINE void MicroTile(D d, const hn::TFromD<D>* HWY_RESTRICT lhs, const BT* HWY_RESTRICT rhs,
                          int64_t ldb, int64_t depth, hn::TFromD<D>* HWY_RESTRICT out, int64_t ldc,
                          int64_t rows, int64_t cols, bool accumulate) {
  using T = hn::TFromD<D>;
  constexpr int64_t L = static_cast<int64_t>(hn::MaxLanes(D()));
  // Touch the output tile now: its loads at the end then hit L1 instead of stalling the
  // epilogue on L2/L3 (a task sweeps all its rows between two visits of a tile).
  for (int64_t r = 0; r < rows; ++r) {
    for (int v = 0; v < NRV; ++v) hwy::Prefetch(out + r * ldc + v * L);
  }
  hn::Vec<D> acc[MR][NRV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NRV; ++v) acc[r][v] = hn::Zero(d);
  }
  for (int64_t k = 0; k < depth; ++k) {
    hn::Vec<D> b[NRV];
#pragma GCC unroll 4
    for (int v = 0; v < NRV; ++v) b[v] = LoadWiden(d, rhs + k * ldb + v * L);
    const T* a = lhs + k * LS;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      // A memory broadcast: the FMA reads its lhs operand straight from the packed panel.
      const hn::Vec<D> a_r = hn::Set(d, a[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NRV; ++v) acc[r][v] = hn::MulAdd(a_r, b[v], acc[r][v]);
    }
  }
  if (rows == MR && cols == NRV * L) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
      for (int v = 0; v < NRV; ++v) {
        T* dst = out + r * ldc + v * L;
        const hn::Vec<D> sum = accumulate ? hn::Add(acc[r][v], hn::LoadU(d, dst)) : acc[r][v];
        hn::StoreU(sum, d, dst);
      }
    }
    return;
  }
  // Edge tile (a group's last rows, N's last columns): the same registers, stored under a lane
  // mask so nothing past the tile is read or written (masked loads/stores do not fault).
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (r >= rows) break;
#pragma GCC unroll 4
    for (int v = 0; v < NRV; ++v) {
      const int64_t valid = cols - v * L;
      if (valid <= 0) break;
      T* dst = out + r * ldc + v * L;
      if (valid >= L) {
        const hn::Vec<D> sum = accumulate ? hn::Add(acc[r][v], hn::LoadU(d, dst)) : acc[r][v];
        hn::StoreU(sum, d, dst);
      } else {
        const hn::Vec<D> sum =
            accumulate ? hn::Add(acc[r][v], MaskedLoadFirstN(d, dst, static_cast<size_t>(valid)))
                       : acc[r][v];
        StoreFirstN(sum, d, dst, static_cast<size_t>(valid));
      }
    }
  }
}

// Every (micro-panel, strip) pair of one block. Micro-panels outer: one lhs micro-panel
// (mr * depth elements) stays in L1 while the strips of the rhs panel stream past it from L2.
template <int MR, int NRV, typename T, typename BT>
void BlockProduct(const BlockArgs& args) {
  const hn::ScalableTag<T> d;
  constexpr int64_t NR = NRV * static_cast<int64_t>(hn::MaxLanes(hn::ScalableTag<T>()));
  const T* lhs = static_cast<const T*>(args.lhs_block);
  const BT* rhs = static_cast<const BT*>(args.rhs);
  T* out = static_cast<T*>(args.out);
  const int64_t panels = ceil_div(args.rows, MR), strips = ceil_div(args.cols, NR);
  PrefetchCursor prefetch(args.next_rhs, panels * strips);
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t rows = std::min<int64_t>(MR, args.rows - p * MR);
    for (int64_t s = 0; s < strips; ++s) {
      const T* panel = lhs + p * args.depth * MR;
      const BT* strip = rhs + s * args.rhs_strip_stride;
      T* tile = out + p * MR * args.ldc + s * NR;
      const int64_t cols = std::min<int64_t>(NR, args.cols - s * NR);
      // The last panel of a block may be a tail: fewer accumulator rows (micro_tile.h).
      dispatch_tile_rows<MR>(rows, [&](auto tile_rows) {
        MicroTile<decltype(tile_rows)::value, NRV, decltype(d), BT, MR>(
            d, panel, strip, args.ldb, args.depth, tile, args.ldc, rows, cols, args.accumulate);
      });
      prefetch.step();
    }
  }
}

constexpr int kF32Lanes = static_cast<int>(hn::MaxLanes(hn::ScalableTag<float>()));

// Finds (mr, nr_vectors) in this target's shape table at compile time; false if absent. f64
// instantiates only the first shape (the f64 path only has to be right, not tunable).
template <typename T, typename BT, size_t I = 0>
bool RunShape(const BlockArgs& args) {
  constexpr std::span<const MicroKernelShape> shapes = micro_kernel_shapes(kF32Lanes);
  constexpr size_t count = std::is_same_v<T, double> ? 1 : shapes.size();
  if constexpr (I < count) {
    constexpr MicroKernelShape shape = shapes[I];
    if (args.mr == shape.mr && args.nr_vectors == shape.nr_vectors) {
      BlockProduct<shape.mr, shape.nr_vectors, T, BT>(args);
      return true;
    }
    return RunShape<T, BT, I + 1>(args);
  }
  return false;
}

bool BlockProductF32(const BlockArgs& args) {
  if (args.rhs_packed) return RunShape<float, float>(args);
  switch (args.rhs_dtype) {
    case DType::kF32:
      return RunShape<float, float>(args);
    case DType::kBF16:
      return RunShape<float, bf16>(args);
    case DType::kF16:
      return RunShape<float, f16>(args);
    default:
      return false;
  }
}

bool BlockProductF64(const BlockArgs& args) {
  return args.rhs_packed && RunShape<double, double>(args);
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(BlockProductF32);
HWY_EXPORT(BlockProductF64);

bool block_product_f32(const BlockArgs& args) {
  return HWY_DYNAMIC_DISPATCH(BlockProductF32)(args);
}
bool block_product_f64(const BlockArgs& args) {
  return HWY_DYNAMIC_DISPATCH(BlockProductF64)(args);
}

}  // namespace tokamax
#endif  // HWY_ONCE
