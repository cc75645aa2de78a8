// Float64 dot-rows kernels for the oracles (f64_dot_kernel.h), compiled once per SIMD target.
//
// Dimensions.
//   kc     the K extent of one block
//   MR, NRV, NR   the micro-tile: MR rows of a x NR = NRV * L rows of b
//   L      f64 lanes of one vector
//
// The micro-tile keeps MR x NRV value and MR x NRV magnitude accumulators in registers for the
// whole block: each k step loads NRV b vectors, takes their |.|, and issues 2 MR NRV FMAs whose
// a operands are broadcasts from the packed panel (its values, then its |values|, so no abs is
// paid per FMA). Value and magnitude come out of one pass over the operands: the
// magnitude is the same contraction of |a| and |b| (|a b| = |a| |b| exactly in binary floating
// point), so it costs FMAs but no extra memory traffic.
#include "ops/common/f64_dot_kernel.h"

#include <algorithm>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/f64_dot_kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<double>;
using V = hn::Vec<D>;

// 32 vector registers (AVX-512): 4 x 2 value and 4 x 2 magnitude accumulators, two b vectors
// and their |b|, the four a and four |a| broadcasts and the abs mask: 29 registers (6 x 2 spills
// accumulators: GCC keeps the broadcasts in registers rather than as FMA memory operands). 32
// independent FMA chains cover the FMA latency times two FMA ports. 16 registers (AVX2) and the
// scalar fallback: 2 x 2, 8 accumulators with room for b, |b| and the broadcasts.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kMR = 4;
constexpr int kNRV = 2;
#else
constexpr int kMR = 2;
constexpr int kNRV = 2;
#endif
constexpr int64_t kL = static_cast<int64_t>(hn::MaxLanes(D()));
constexpr int64_t kNR = kNRV * kL;

// value / magnitude [MR, NR] (row stride ldc) continue their sums (accumulate) or start from
// zero, over kc steps of a [kc][2 MR] and b [kc][NR].
template <bool kMagnitude>
HWY_INLINE void MicroTile(const double* HWY_RESTRICT a, const double* HWY_RESTRICT b, int64_t kc,
                          double* HWY_RESTRICT value, double* HWY_RESTRICT magnitude, int64_t ldc,
                          bool accumulate) {
  const D d;
  V acc[kMR][kNRV], mag[kMR][kNRV];
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kNRV; ++v) {
      // Loading the running sum first keeps every output one FMA chain in k order.
      acc[r][v] = accumulate ? hn::LoadU(d, value + r * ldc + v * kL) : hn::Zero(d);
      if constexpr (kMagnitude) {
        mag[r][v] = accumulate ? hn::LoadU(d, magnitude + r * ldc + v * kL) : hn::Zero(d);
      }
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    const double* ak = a + k * 2 * kMR;
    const double* bk = b + k * kNR;
#pragma GCC unroll 4
    for (int v = 0; v < kNRV; ++v) {
      const V bv = hn::LoadU(d, bk + v * kL);
      const V b_abs = hn::Abs(bv);
#pragma GCC unroll 8
      for (int r = 0; r < kMR; ++r) {
        acc[r][v] = hn::MulAdd(hn::Set(d, ak[r]), bv, acc[r][v]);
        if constexpr (kMagnitude) mag[r][v] = hn::MulAdd(hn::Set(d, ak[kMR + r]), b_abs, mag[r][v]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kNRV; ++v) {
      hn::StoreU(acc[r][v], d, value + r * ldc + v * kL);
      if constexpr (kMagnitude) hn::StoreU(mag[r][v], d, magnitude + r * ldc + v * kL);
    }
  }
}

template <bool kMagnitude>
void BlockProductT(const F64BlockArgs& args) {
  // Edge tiles run whole through this local tile (the packed padding is zero) and copy back
  // only their rows and columns.
  alignas(64) double edge_value[kMR * kNR], edge_magnitude[kMR * kNR];
  for (int64_t s = 0, c0 = 0; c0 < args.cols; ++s, c0 += kNR) {
    const double* b = args.b_strips + s * args.b_stride;
    const int64_t cols = std::min(kNR, args.cols - c0);
    for (int64_t p = 0, r0 = 0; r0 < args.rows; ++p, r0 += kMR) {
      const double* a = args.a_panels + p * args.a_stride;
      const int64_t rows = std::min<int64_t>(kMR, args.rows - r0);
      double* value = args.value + r0 * args.ldc + c0;
      double* magnitude = kMagnitude ? args.magnitude + r0 * args.ldc + c0 : nullptr;
      if (rows == kMR && cols == kNR) {
        MicroTile<kMagnitude>(a, b, args.kc, value, magnitude, args.ldc, args.accumulate);
        continue;
      }
      if (args.accumulate) {
        std::fill(edge_value, edge_value + kMR * kNR, 0.0);
        std::fill(edge_magnitude, edge_magnitude + kMR * kNR, 0.0);
        for (int64_t r = 0; r < rows; ++r) {
          std::copy(value + r * args.ldc, value + r * args.ldc + cols, edge_value + r * kNR);
          if (kMagnitude) {
            std::copy(magnitude + r * args.ldc, magnitude + r * args.ldc + cols,
                      edge_magnitude + r * kNR);
          }
        }
      }
      MicroTile<kMagnitude>(a, b, args.kc, edge_value, edge_magnitude, kNR, args.accumulate);
      for (int64_t r = 0; r < rows; ++r) {
        std::copy(edge_value + r * kNR, edge_value + r * kNR + cols, value + r * args.ldc);
        if (kMagnitude) {
          std::copy(edge_magnitude + r * kNR, edge_magnitude + r * kNR + cols,
                    magnitude + r * args.ldc);
        }
      }
    }
  }
}

void BlockProduct(const F64BlockArgs& args) {
  if (args.magnitude != nullptr) {
    BlockProductT<true>(args);
  } else {
    BlockProductT<false>(args);
  }
}

// Four partial sums per quantity (one chain would be bound by the FMA latency), a scalar tail.
template <bool kMagnitude>
void DotT(const double* HWY_RESTRICT a, const double* HWY_RESTRICT b, int64_t K, double* value,
          double* magnitude) {
  const D d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  V s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  V m0 = hn::Zero(d), m1 = hn::Zero(d), m2 = hn::Zero(d), m3 = hn::Zero(d);
  int64_t k = 0;
  for (; k + 4 * L <= K; k += 4 * L) {
    const V a0 = hn::LoadU(d, a + k), a1 = hn::LoadU(d, a + k + L);
    const V a2 = hn::LoadU(d, a + k + 2 * L), a3 = hn::LoadU(d, a + k + 3 * L);
    const V b0 = hn::LoadU(d, b + k), b1 = hn::LoadU(d, b + k + L);
    const V b2 = hn::LoadU(d, b + k + 2 * L), b3 = hn::LoadU(d, b + k + 3 * L);
    s0 = hn::MulAdd(a0, b0, s0);
    s1 = hn::MulAdd(a1, b1, s1);
    s2 = hn::MulAdd(a2, b2, s2);
    s3 = hn::MulAdd(a3, b3, s3);
    if constexpr (kMagnitude) {
      m0 = hn::MulAdd(hn::Abs(a0), hn::Abs(b0), m0);
      m1 = hn::MulAdd(hn::Abs(a1), hn::Abs(b1), m1);
      m2 = hn::MulAdd(hn::Abs(a2), hn::Abs(b2), m2);
      m3 = hn::MulAdd(hn::Abs(a3), hn::Abs(b3), m3);
    }
  }
  for (; k + L <= K; k += L) {
    const V av = hn::LoadU(d, a + k), bv = hn::LoadU(d, b + k);
    s0 = hn::MulAdd(av, bv, s0);
    if constexpr (kMagnitude) m0 = hn::MulAdd(hn::Abs(av), hn::Abs(bv), m0);
  }
  double sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  double abs_sum = 0.0;
  if constexpr (kMagnitude) {
    abs_sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(m0, m1), hn::Add(m2, m3))));
  }
  for (; k < K; ++k) {
    const double t = a[k] * b[k];
    sum += t;
    abs_sum += t < 0 ? -t : t;
  }
  *value = sum;
  if constexpr (kMagnitude) *magnitude = abs_sum;
}

void Dot(const double* a, const double* b, int64_t K, double* value, double* magnitude) {
  if (magnitude != nullptr) {
    DotT<true>(a, b, K, value, magnitude);
  } else {
    DotT<false>(a, b, K, value, nullptr);
  }
}

F64TileShape TileShape() { return {kMR, static_cast<int>(kNR)}; }

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(BlockProduct);
HWY_EXPORT(Dot);
HWY_EXPORT(TileShape);

F64TileShape f64_tile_shape() { return HWY_DYNAMIC_DISPATCH(TileShape)(); }
void f64_block_product(const F64BlockArgs& args) { HWY_DYNAMIC_DISPATCH(BlockProduct)(args); }
void f64_dot(const double* a, const double* b, int64_t K, double* value, double* magnitude) {
  HWY_DYNAMIC_DISPATCH(Dot)(a, b, K, value, magnitude);
}

}  // namespace tokamax
#endif  // HWY_ONCE
