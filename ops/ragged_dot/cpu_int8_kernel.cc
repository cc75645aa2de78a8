// ragged_dot on CPU: the int8 x int8 micro-kernels (AVX512-VNNI vpdpbusd) and their rhs pack.
//
// Dimensions: as cpu_int8_kernel.h.
//
// The functions that use the instructions carry their target attribute, so the file builds for
// the baseline ISA and runs them only where int8_vnni_available() says the CPU has them.
#include "ops/ragged_dot/cpu_int8_kernel.h"

#include <algorithm>
#include <cstring>

#include "ops/common/cpu_gemm/micro_tile.h"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 warns that the unmasked AVX-512 intrinsics' internal _mm512_undefined_*() operand may
// be used uninitialized; it is the documented don't-care operand of an unmasked operation.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define TOKAMAX_INT8_VNNI 1
#define TOKAMAX_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#else
#define TOKAMAX_INT8_VNNI 0
#endif

namespace tokamax {

bool int8_vnni_available() {
#if TOKAMAX_INT8_VNNI
  static const bool available =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return available;
#else
  return false;
#endif
}

bool has_int8_micro_kernel(int mr, int nr) {
  return (mr == 8 && nr == 48) || (mr == 6 && nr == 64);
}

namespace {

// One quad row of 16 columns, scalar: the edges (past depth or cols), zero-padded.
void pack_quad_scalar(const int8_t* rhs, int64_t ld, int64_t k_left, int64_t c_left, int8_t* dst,
                      int32_t* colsum) {
  for (int64_t c = 0; c < 16; ++c) {
    for (int64_t j = 0; j < 4; ++j) {
      const int8_t code = (j < k_left && c < c_left) ? rhs[j * ld + c] : int8_t{0};
      dst[c * 4 + j] = code;
      colsum[c] += 128 * code;
    }
  }
}

#if TOKAMAX_INT8_VNNI

// 16 columns of `quads` full quads (4 rows each) -> per quad 16 lanes of (k, k+1, k+2, k+3) at
// dst + q * dst_stride; colsum[0, 16) += 128 times the columns' sums, kept in registers.
TOKAMAX_VNNI_TARGET void pack_chunk_vnni(const int8_t* rhs, int64_t ld, int64_t quads, int8_t* dst,
                                         int64_t dst_stride, int32_t* colsum) {
  const __m128i weight = _mm_set1_epi8(static_cast<char>(128));  // u8 128
  __m128i sum[4];
  for (int i = 0; i < 4; ++i)
    sum[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(colsum + 4 * i));
  for (int64_t q = 0; q < quads; ++q, rhs += 4 * ld, dst += dst_stride) {
    const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rhs));
    const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rhs + ld));
    const __m128i r2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rhs + 2 * ld));
    const __m128i r3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rhs + 3 * ld));
    const __m128i t0 = _mm_unpacklo_epi8(r0, r1), t1 = _mm_unpackhi_epi8(r0, r1);
    const __m128i t2 = _mm_unpacklo_epi8(r2, r3), t3 = _mm_unpackhi_epi8(r2, r3);
    const __m128i p[4] = {_mm_unpacklo_epi16(t0, t2), _mm_unpackhi_epi16(t0, t2),
                          _mm_unpacklo_epi16(t1, t3), _mm_unpackhi_epi16(t1, t3)};
    for (int i = 0; i < 4; ++i) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16 * i), p[i]);
      sum[i] = _mm_dpbusd_epi32(sum[i], weight, p[i]);
    }
  }
  for (int i = 0; i < 4; ++i) _mm_storeu_si128(reinterpret_cast<__m128i*>(colsum + 4 * i), sum[i]);
}

// acc += the four-way u8 x s8 dot products of x and w, in place. GCC 12 lowers the intrinsic
// to a copy per instruction (it does not tie the accumulator to the destination) and then spills
// the tile; the asm keeps each accumulator in its register.
TOKAMAX_VNNI_TARGET inline __m512i dpbusd(__m512i acc, __m512i x, __m512i w) {
  asm("vpdpbusd %[w], %[x], %[acc]" : [acc] "+v"(acc) : [x] "v"(x), [w] "v"(w));
  return acc;
}

// 64 G columns of `quads` full quads at once, row by row (each quad row reads its 4 G lines of
// every source row together). Per 64 columns: four 64-byte rows interleaved within their
// 128-bit lanes, then a 4 x 4 transpose of the lanes puts each 16-column chunk's quad row in
// one register. chunk_dst(i) is chunk i's packed quad 0 (i < 4 G); quads are dst_stride bytes
// apart.
template <int G, typename ChunkDst>
TOKAMAX_VNNI_TARGET void pack_64_vnni(const int8_t* rhs, int64_t ld, int64_t quads,
                                      int64_t dst_stride, int32_t* colsum,
                                      const ChunkDst& chunk_dst) {
  const __m512i weight = _mm512_set1_epi8(static_cast<char>(128));
  __m512i sum[4 * G];
  int8_t* dst[4 * G];
  for (int i = 0; i < 4 * G; ++i) {
    sum[i] = _mm512_loadu_si512(colsum + 16 * i);
    dst[i] = chunk_dst(i);
  }
  for (int64_t q = 0; q < quads; ++q, rhs += 4 * ld) {
    for (int g = 0; g < G; ++g) {
      const int8_t* src = rhs + 64 * g;
      const __m512i r0 = _mm512_loadu_si512(src), r1 = _mm512_loadu_si512(src + ld);
      const __m512i r2 = _mm512_loadu_si512(src + 2 * ld);
      const __m512i r3 = _mm512_loadu_si512(src + 3 * ld);
      const __m512i t0 = _mm512_unpacklo_epi8(r0, r1), t1 = _mm512_unpackhi_epi8(r0, r1);
      const __m512i t2 = _mm512_unpacklo_epi8(r2, r3), t3 = _mm512_unpackhi_epi8(r2, r3);
      const __m512i p0 = _mm512_unpacklo_epi16(t0, t2), p1 = _mm512_unpackhi_epi16(t0, t2);
      const __m512i p2 = _mm512_unpacklo_epi16(t1, t3), p3 = _mm512_unpackhi_epi16(t1, t3);
      const __m512i a = _mm512_shuffle_i32x4(p0, p1, 0x44);
      const __m512i b = _mm512_shuffle_i32x4(p0, p1, 0xEE);
      const __m512i c = _mm512_shuffle_i32x4(p2, p3, 0x44);
      const __m512i d = _mm512_shuffle_i32x4(p2, p3, 0xEE);
      const __m512i out[4] = {_mm512_shuffle_i32x4(a, c, 0x88), _mm512_shuffle_i32x4(a, c, 0xDD),
                              _mm512_shuffle_i32x4(b, d, 0x88), _mm512_shuffle_i32x4(b, d, 0xDD)};
      for (int i = 0; i < 4; ++i) {
        _mm512_storeu_si512(dst[4 * g + i] + q * dst_stride, out[i]);
        sum[4 * g + i] = dpbusd(sum[4 * g + i], weight, out[i]);
      }
    }
  }
  for (int i = 0; i < 4 * G; ++i) _mm512_storeu_si512(colsum + 16 * i, sum[i]);
}

template <int MR, int NV>
TOKAMAX_VNNI_TARGET void tile(const Int8TileArgs& a) {
  constexpr int NR = 16 * NV;
  __m512i acc[MR][NV];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_si512();
  }
  const int8_t* rhs = a.rhs;
  // One prefetch every `every` quads (a scalar countdown beside the vector work).
  PrefetchShare prefetch = a.prefetch;
  const int64_t every = std::max<int64_t>(1, a.quads / std::max<int64_t>(1, prefetch.lines));
  int64_t countdown = 0;
  for (int64_t q = 0; q < a.quads; ++q, rhs += NR * 4) {
    if (--countdown <= 0) {
      prefetch.next();
      countdown = every;
    }
    __m512i b[NV];
    for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_si512(rhs + 64 * v);
    const uint8_t* lhs = a.lhs + 4 * q;
    for (int r = 0; r < MR; ++r) {
      int32_t quad;
      std::memcpy(&quad, lhs + r * a.ld_lhs, sizeof(quad));
      const __m512i x = _mm512_set1_epi32(quad);
      for (int v = 0; v < NV; ++v) acc[r][v] = dpbusd(acc[r][v], x, b[v]);
    }
  }
  __m512 rhs_scale[NV];
  __m512i colsum[NV];
  __mmask16 mask[NV];
  for (int v = 0; v < NV; ++v) {
    rhs_scale[v] = _mm512_loadu_ps(a.rhs_scale + 16 * v);
    colsum[v] = _mm512_loadu_si512(a.colsum + 16 * v);
    const int left = std::clamp(a.cols - 16 * v, 0, 16);
    mask[v] = static_cast<__mmask16>((1u << left) - 1u);
  }
  for (int r = 0; r < MR; ++r) {
    if (r >= a.rows) break;
    const __m512 s = _mm512_set1_ps(a.lhs_scale[r * a.ld_scale]);
    float* out = a.out + r * a.ldc;
    for (int v = 0; v < NV; ++v) {
      // maskz: the plain form reads an undefined register, which GCC 12 warns about.
      __m512 f = _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_sub_epi32(acc[r][v], colsum[v]));
      f = _mm512_mul_ps(f, _mm512_mul_ps(rhs_scale[v], s));
      if (a.accumulate) f = _mm512_add_ps(f, _mm512_maskz_loadu_ps(mask[v], out + 16 * v));
      _mm512_mask_storeu_ps(out + 16 * v, mask[v], f);
    }
  }
}

// 16 values of the row from k (masked past the block's end: unmasked loads for whole vectors)
// as f32.
TOKAMAX_VNNI_TARGET inline __m512 load_row(const void* x, bool bf16, int64_t k, __mmask16 mask) {
  if (bf16) {
    const uint16_t* row = static_cast<const uint16_t*>(x) + k;
    const __m256i bits = mask == 0xFFFF ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row))
                                        : _mm256_maskz_loadu_epi16(mask, row);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  const float* row = static_cast<const float*>(x) + k;
  return mask == 0xFFFF ? _mm512_loadu_ps(row) : _mm512_maskz_loadu_ps(mask, row);
}

TOKAMAX_VNNI_TARGET void quantize_row_u8_vnni(const void* x, bool bf16, int64_t K, int64_t b,
                                              uint8_t* codes, float* scales) {
  // Whole vectors unmasked, the last partial one masked.
  auto mask_at = [b](int64_t k) {
    return static_cast<__mmask16>(k + 16 <= b ? 0xFFFFu : (1u << (b - k)) - 1u);
  };
  for (int64_t j = 0; j * b < K; ++j) {
    const int64_t k0 = j * b;
    __m512 amax = _mm512_setzero_ps();
    for (int64_t k = 0; k < b; k += 16) {
      amax = _mm512_max_ps(amax, _mm512_abs_ps(load_row(x, bf16, k0 + k, mask_at(k))));
    }
    const float s = _mm512_reduce_max_ps(amax) / 127.0f;
    scales[j] = s;
    if (s == 0.0f) {
      std::memset(codes + k0, 128, static_cast<size_t>(b));
      continue;
    }
    const __m512 inv = _mm512_set1_ps(1.0f / s);
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    const __m128i flip = _mm_set1_epi8(static_cast<char>(0x80));
    for (int64_t k = 0; k < b; k += 16) {
      const __mmask16 mask = mask_at(k);
      // x * (1 / s) clamped, then rounded to nearest even by the conversion (the MXCSR
      // default; rounding a value clamped to +-127 gives what clamping the rounded one does),
      // + 128 as bytes.
      const __m512 v = _mm512_mul_ps(load_row(x, bf16, k0 + k, mask), inv);
      const __m512i q = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lo), hi));
      const __m128i bytes = _mm_xor_si128(_mm512_cvtepi32_epi8(q), flip);
      if (mask == 0xFFFF) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + k0 + k), bytes);
      } else {
        _mm_mask_storeu_epi8(codes + k0 + k, mask, bytes);
      }
    }
  }
}

#endif  // TOKAMAX_INT8_VNNI

}  // namespace

bool quantize_row_u8(const void* x, bool bf16, int64_t K, int64_t b, uint8_t* codes,
                     float* scales) {
#if TOKAMAX_INT8_VNNI
  if (!int8_vnni_available()) return false;
  quantize_row_u8_vnni(x, bf16, K, b, codes, scales);
  return true;
#else
  (void)x, (void)bf16, (void)K, (void)b, (void)codes, (void)scales;
  return false;
#endif
}

void pack_rhs_int8_quads(const int8_t* rhs, int64_t ld, int64_t depth, int64_t cols, int nr,
                         int8_t* packed, int32_t* colsum) {
  const int64_t quads = (depth + 3) / 4, full_quads = depth / 4, strips = (cols + nr - 1) / nr;
  const int chunks_per_strip = nr / 16;
  // Chunk ci (16 columns) of the panel: strip ci / chunks_per_strip, at its ci % ... place.
  auto chunk_base = [&](int64_t ci) {
    return packed + ((ci / chunks_per_strip) * quads * nr + (ci % chunks_per_strip) * 16) * 4;
  };
  int64_t done = 0;  // columns [0, done) of the full quads packed 64 at a time
#if TOKAMAX_INT8_VNNI
  if (int8_vnni_available()) {
    // Three 64-column groups per pass down the rows where they fit, then one.
    for (; done + 64 <= cols;) {
      const int64_t ci = done / 16;
      auto chunk_dst = [&](int i) { return chunk_base(ci + i); };
      if (done + 192 <= cols) {
        pack_64_vnni<3>(rhs + done, ld, full_quads, int64_t{nr} * 4, colsum + done, chunk_dst);
        done += 192;
      } else {
        pack_64_vnni<1>(rhs + done, ld, full_quads, int64_t{nr} * 4, colsum + done, chunk_dst);
        done += 64;
      }
    }
  }
#endif
  for (int64_t s = 0; s < strips; ++s) {
    for (int64_t c16 = 0; c16 < nr; c16 += 16) {
      const int64_t c = s * nr + c16;
      int8_t* dst = packed + (s * quads * nr + c16) * 4;
      int32_t* sum = colsum + c;
      int64_t q = c + 16 <= done ? full_quads : 0;
#if TOKAMAX_INT8_VNNI
      if (q == 0 && c + 16 <= cols && int8_vnni_available()) {
        pack_chunk_vnni(rhs + c, ld, full_quads, dst, int64_t{nr} * 4, sum);
        q = full_quads;
      }
#endif
      if (c >= cols) {  // a chunk of zero padding in the last strip: zero codes, no sums
        for (; q < quads; ++q) std::memset(dst + q * nr * 4, 0, 64);
      }
      for (; q < quads; ++q) {
        pack_quad_scalar(rhs + 4 * q * ld + c, ld, depth - 4 * q, cols - c, dst + q * nr * 4, sum);
      }
    }
  }
}

bool int8_tile(int mr, int nr, const Int8TileArgs& args) {
#if TOKAMAX_INT8_VNNI
  if (!int8_vnni_available()) return false;
  // A group's last micro-panel of few rows runs a tail tile of fewer accumulator rows
  // (micro_tile.h: dispatch_tile_rows), as the f32 and bf16 kernels do.
  if (mr == 8 && nr == 48) {
    dispatch_tile_rows<8>(args.rows, [&](auto rows) { tile<decltype(rows)::value, 3>(args); });
    return true;
  }
  if (mr == 6 && nr == 64) {
    dispatch_tile_rows<6>(args.rows, [&](auto rows) { tile<decltype(rows)::value, 4>(args); });
    return true;
  }
#endif
  (void)mr;
  (void)nr;
  (void)args;
  return false;
}

}  // namespace tokamax
