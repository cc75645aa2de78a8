// CPU GEMM engine: per-target in-register transposition of lhs rows into micro-panels.
//
// Dimensions.
//   L      f32 lanes of the Highway target (16 on AVX-512, 8 on AVX2)
//   mr     rows of one lhs micro-panel (<= L for the register path)
//
// A Highway "-inl" header for pack.cc: included after hwy/highway.h and re-included by
// foreach_target.h once per target (the toggle guard below). x86 vector targets get a
// TransposeVec, LoadRowChunk, Transpose, StoreLanes and StreamLanes; the others only
// kTransposeLanes = 0, which sends the packing to its scalar loop.
#if defined(TOKAMAX_OPS_RAGGED_DOT_CPU_TRANSPOSE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TOKAMAX_OPS_RAGGED_DOT_CPU_TRANSPOSE_INL_H_
#undef TOKAMAX_OPS_RAGGED_DOT_CPU_TRANSPOSE_INL_H_
#else
#define TOKAMAX_OPS_RAGGED_DOT_CPU_TRANSPOSE_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/common/masked_load-inl.h"
#include "ops/framework/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {

// --- lhs transposition [rows, depth] -> [depth][mr] per micro-panel. -------------------------
// The lhs block is packed once per (task, K block) and then feeds every column of the task, yet
// a scalar transposition still costs a visible share of an f32 GEMM (one load and one strided
// store per element; measured: docs/measurement_log.md, "lhs transposition"). On x86 the
// micro-panel is transposed in registers instead, L rows x L k at a time (L = 16 on AVX-512, 8
// on AVX2): rows past the group's end are loaded as zeros, and each k stores its mr lanes with
// one masked store.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr int64_t kTransposeLanes = 16;
using TransposeVec = __m512;

// `count` (<= 16) consecutive elements widened to f32; the rest of the vector is zero (masked
// loads never touch memory past `count`). 32-bit elements (f32, and bf16 pairs viewed as one
// word) are moved bit for bit: the shuffles below do no arithmetic.
template <typename In>
HWY_INLINE __m512 LoadRowChunk(const In* src, int64_t count) {
  const __mmask16 mask = static_cast<__mmask16>(count >= 16 ? 0xFFFFu : (1u << count) - 1u);
  if constexpr (sizeof(In) == 4) {
    return _mm512_maskz_loadu_ps(mask, src);
  } else if constexpr (std::is_same_v<In, bf16>) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, src));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  } else {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, src));
  }
}

// 16x16 transpose in four shuffle stages (unpack ps, unpack pd, two 128-bit lane shuffles):
// 64 shuffles per 256 elements. On return r[k] holds column k, lane i = row i.
HWY_INLINE void Transpose(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // rows 4g..4g+3; lane L of r[4g + j] = column j + 4L
    const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
    r[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
    t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
    t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
    r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd);
  }
}

HWY_INLINE void StoreLanes(float* dst, int64_t mr, __m512 v) {
  _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << mr) - 1u), v);
}
// All lanes to a 64-byte aligned dst, bypassing the caches (pack.h: `stream`).
HWY_INLINE void StreamLanes(float* dst, __m512 v) { _mm512_stream_ps(dst, v); }
HWY_INLINE __m512 LoadAlignedLanes(const float* src) { return _mm512_load_ps(src); }
#elif HWY_TARGET == HWY_AVX2
constexpr int64_t kTransposeLanes = 8;
using TransposeVec = __m256;

// AVX2 has masked loads for 32-bit lanes only: partial chunks of 16-bit inputs go through a
// small zero-padded copy.
template <typename In>
HWY_INLINE __m256 LoadRowChunk(const In* src, int64_t count) {
  if (count < 8) {
    alignas(32) float tmp[8] = {};
    for (int64_t k = 0; k < count; ++k) {
      if constexpr (sizeof(In) == 4) {
        std::memcpy(&tmp[k], &src[k], 4);
      } else {
        tmp[k] = to_float(src[k]);
      }
    }
    return _mm256_load_ps(tmp);
  }
  if constexpr (sizeof(In) == 4) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(src));
  } else if constexpr (std::is_same_v<In, bf16>) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  }
}

HWY_INLINE void Transpose(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 2; ++g) {  // rows 4g..4g+3; half H of t[4g + j] = column j + 4H
    const __m256d a = _mm256_castps_pd(t[4 * g]), b = _mm256_castps_pd(t[4 * g + 1]);
    const __m256d c = _mm256_castps_pd(t[4 * g + 2]), d = _mm256_castps_pd(t[4 * g + 3]);
    t[4 * g + 0] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, c));
    t[4 * g + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, c));
    t[4 * g + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(b, d));
    t[4 * g + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(b, d));
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(t[j], t[4 + j], 0x20);
    r[4 + j] = _mm256_permute2f128_ps(t[j], t[4 + j], 0x31);
  }
}

HWY_INLINE void StoreLanes(float* dst, int64_t mr, __m256 v) {
  const hn::Full256<float> d;
  StoreFirstN(hn::Vec<decltype(d)>{v}, d, dst, static_cast<size_t>(mr));
}
// All lanes to a 32-byte aligned dst, bypassing the caches (pack.h: `stream`).
HWY_INLINE void StreamLanes(float* dst, __m256 v) { _mm256_stream_ps(dst, v); }
HWY_INLINE __m256 LoadAlignedLanes(const float* src) { return _mm256_load_ps(src); }
#else
constexpr int64_t kTransposeLanes = 0;  // no register transposition: PackLhsScalar
#endif

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TOKAMAX_OPS_RAGGED_DOT_CPU_TRANSPOSE_INL_H_ toggle
