// The flash-attention core (every attention op's CPU kernel): packing K, V and P into micro-kernel
// layouts, element helpers.
//
// Dimensions: see pack.h.
#include "ops/common/flash_attention/pack.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/simd_target.h"
#include "ops/common/cpu_gemm/micro_kernel.h"
#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/common/cpu_gemm/pack.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tokamax {

float attention_load(DType dtype, const void* data, int64_t at) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[at];
    case DType::kBF16:
      return bf16_to_float(static_cast<const bf16*>(data)[at]);
    case DType::kF16:
      return f16_to_float(static_cast<const f16*>(data)[at]);
    default:
      return static_cast<float>(static_cast<const double*>(data)[at]);
  }
}

// s[c] += bias[at + c * stride] for c in [c_lo, c_hi). Contiguous f32 and bf16 rows (the
// common layouts: alphafold's per-head bias) get loops the compiler vectorizes; the rest goes
// element by element.
void add_bias_row(DType dtype, const void* bias, int64_t at, int64_t stride, int64_t c_lo,
                  int64_t c_hi, float* s) {
  if (stride == 1 && dtype == DType::kF32) {
    const float* row = static_cast<const float*>(bias) + at;
    for (int64_t c = c_lo; c < c_hi; ++c) s[c] += row[c];
  } else if (stride == 1 && dtype == DType::kBF16) {
    const uint16_t* row = reinterpret_cast<const uint16_t*>(static_cast<const bf16*>(bias) + at);
    for (int64_t c = c_lo; c < c_hi; ++c) {
      const uint32_t bits = uint32_t{row[c]} << 16;
      float x;
      std::memcpy(&x, &bits, sizeof(x));
      s[c] += x;
    }
  } else if (stride == 0) {
    const float x = attention_load(dtype, bias, at);
    for (int64_t c = c_lo; c < c_hi; ++c) s[c] += x;
  } else {
    for (int64_t c = c_lo; c < c_hi; ++c) s[c] += attention_load(dtype, bias, at + c * stride);
  }
}

// rows [rows, depth] -> [ceil(rows / nr)][depth][nr]: the GEMM engine's lhs packing with mr = nr.
// That packing transposes in registers up to 16 rows, so a strip is packed 16 rows at a time
// into `scratch` ([depth][16]) and copied into its columns.
void pack_strips(DType dtype, const void* rows, int64_t ld, int64_t count, int64_t depth,
                 int64_t nr, bool native, float* out) {
  constexpr int64_t kGroup = 16;
  const int64_t strips = (count + nr - 1) / nr;
  const int64_t words = native ? (depth + 1) / 2 : depth;
  const int64_t group = nr % kGroup == 0 ? kGroup : nr;
  const int64_t x_size = static_cast<int64_t>(dtype_size(dtype));
  std::vector<float> scratch(static_cast<size_t>(words * group));
  for (int64_t st = 0; st < strips; ++st) {
    float* strip = out + st * words * nr;
    for (int64_t g0 = 0; g0 < nr; g0 += group) {
      const int64_t r0 = st * nr + g0, height = std::min(group, count - r0);
      if (height <= 0) {
        for (int64_t x = 0; x < words; ++x) std::fill_n(strip + x * nr + g0, group, 0.0f);
        continue;
      }
      const char* src = static_cast<const char*>(rows) + r0 * ld * x_size;
      if (native) {
        pack_lhs_block_pairs(reinterpret_cast<const bf16*>(src), ld, height, depth, group,
                             reinterpret_cast<uint32_t*>(scratch.data()));
      } else {
        pack_lhs_block(dtype, src, ld, height, depth, group, scratch.data());
      }
      if (group == kGroup) {  // a constant size: one vector move instead of a memcpy call
        for (int64_t x = 0; x < words; ++x) {
          std::memcpy(strip + x * nr + g0, &scratch[x * kGroup], kGroup * sizeof(float));
        }
      } else {
        for (int64_t x = 0; x < words; ++x) {
          std::memcpy(strip + x * nr + g0, &scratch[x * group], group * sizeof(float));
        }
      }
    }
  }
}

KvRows kv_rows(const FlashAttentionProblem& p, const void* base, bool value, int64_t b, int64_t i,
               int64_t j0, int64_t n, std::vector<char>& staging) {
  const int64_t x_size = static_cast<int64_t>(dtype_size(p.dtype));
  const char* data = static_cast<const char*>(base);
  auto at = [&](int64_t j) { return data + (value ? p.v_at(b, j, i) : p.k_at(b, j, i)) * x_size; };
  const int64_t ld = value ? p.v_stride() : p.k_stride();
  if (!p.kv_pages || j0 % p.kv_pages->page_size + n <= p.kv_pages->page_size) return {at(j0), ld};
  const int64_t width = value ? p.d : p.D, ps = p.kv_pages->page_size;
  staging.resize(static_cast<size_t>(n * width * x_size));
  for (int64_t j = j0; j < j0 + n;) {  // one page's run of rows at a time
    const int64_t run = std::min(j0 + n, (j / ps + 1) * ps) - j;
    const char* src = at(j);
    for (int64_t r = 0; r < run; ++r) {
      std::memcpy(staging.data() + (j - j0 + r) * width * x_size, src + r * ld * x_size,
                  static_cast<size_t>(width * x_size));
    }
    j += run;
  }
  return {staging.data(), width};
}

namespace {

// Paged K whose pages are not whole panels is packed in pieces of this many keys (a multiple of
// the panel or strip width), each staged through kv_rows: a piece fits in L1 and costs one copy.
constexpr int64_t kPagedPiece = 256;

// Calls pack(rows, count, first) over K of kv head (b, i) in pieces whose first key is a
// multiple of `grain`: the whole of t at once unless K is paged; then page by page, read in
// place, where a page is whole panels.
template <class Pack>
void for_k_pieces(const FlashAttentionProblem& p, const void* k, int64_t b, int64_t i,
                  int64_t grain, Pack&& pack) {
  std::vector<char> staging;
  int64_t piece = std::max<int64_t>(p.t, 1);
  if (p.kv_pages) {
    const int64_t ps = p.kv_pages->page_size;
    piece = ps % grain == 0 ? ps : round_up(kPagedPiece, grain);
  }
  for (int64_t j0 = 0; j0 < p.t; j0 += piece) {
    const int64_t n = std::min(piece, p.t - j0);
    pack(kv_rows(p, k, /*value=*/false, b, i, j0, n, staging), n, j0);
  }
}

}  // namespace

void pack_k(const FlashAttentionProblem& p, const void* k, int64_t b, int64_t i, int64_t nr,
            bool native, float* out) {
  const int64_t words = native ? (p.D + 1) / 2 : p.D;
  for_k_pieces(p, k, b, i, nr, [&](KvRows rows, int64_t n, int64_t j0) {
    pack_strips(p.dtype, rows.data, rows.ld, n, p.D, nr, native, out + j0 / nr * words * nr);
  });
}

void pack_k_panels(const FlashAttentionProblem& p, const void* k, int64_t b, int64_t i, int64_t mr,
                   bool native, float* out) {
  const int64_t words = native ? (p.D + 1) / 2 : p.D;
  for_k_pieces(p, k, b, i, mr, [&](KvRows rows, int64_t n, int64_t j0) {
    float* panels = out + j0 / mr * words * mr;
    if (native) {
      pack_lhs_block_pairs(static_cast<const bf16*>(rows.data), rows.ld, n, p.D, mr,
                           reinterpret_cast<uint32_t*>(panels));
    } else {
      pack_lhs_block(p.dtype, rows.data, rows.ld, n, p.D, mr, panels);
    }
  });
}

// Packs V of kv head (b, i) as the rhs of O += P V, one panel per kv block of bkv keys:
// [ceil(t / bkv)][ceil(d / nr)][bkv][nr] (bf16 pairs: bkv / 2), the last block shorter.
void pack_v(const FlashAttentionProblem& p, const void* v, int64_t b, int64_t i, int64_t nr,
            int64_t bkv, bool native, float* out) {
  const int64_t d = p.d, d_strips = (d + nr - 1) / nr;
  const int64_t block_floats = d_strips * (native ? bkv / 2 : bkv) * nr;
  std::vector<char> staging;
  for (int64_t j0 = 0, kb = 0; j0 < p.t; j0 += bkv, ++kb) {
    const int64_t n = std::min(bkv, p.t - j0);
    const KvRows rows = kv_rows(p, v, /*value=*/true, b, i, j0, n, staging);
    if (native) {
      pack_rhs_panel_pairs(static_cast<const bf16*>(rows.data), rows.ld, n, d, nr,
                           reinterpret_cast<uint32_t*>(out + kb * block_floats));
    } else {
      pack_rhs_panel(p.dtype, rows.data, rows.ld, n, d, nr, out + kb * block_floats);
    }
  }
}

namespace {

// Round-to-nearest-even f32 -> bf16 bits for the finite, non-negative values of P (no NaN or
// overflow handling needed): inline, unlike float_to_bf16, which a profile showed costing as
// much as a third of the bf16 GEMMs when called per element.
inline uint32_t p_to_bf16_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
}

}  // namespace

// P [M, n] f32 (row stride ld) -> the bf16-pair lhs layout [ceil(M / mr)][ceil(n / 2)][mr],
// rounding to nearest even on the way (one pass instead of convert-then-pack). Writes are
// sequential; the mr source rows are read in step.
void pack_p_pairs(const float* s, int64_t ld, int64_t M, int64_t n, int64_t mr, uint32_t* out) {
  const int64_t pairs = (n + 1) / 2, even = n / 2;
  for (int64_t pn = 0; pn * mr < M; ++pn) {
    uint32_t* panel = out + pn * pairs * mr;
    const int64_t rows = std::min(mr, M - pn * mr);
    const float* base = s + pn * mr * ld;
    for (int64_t x = 0; x < even; ++x) {
      uint32_t* dst = panel + x * mr;
      for (int64_t rr = 0; rr < rows; ++rr) {
        const float* row = base + rr * ld + 2 * x;
        dst[rr] = p_to_bf16_bits(row[0]) | (p_to_bf16_bits(row[1]) << 16);
      }
      for (int64_t rr = rows; rr < mr; ++rr) dst[rr] = 0;
    }
    if (pairs > even) {  // odd n: the last pair's high half is +0
      uint32_t* dst = panel + even * mr;
      for (int64_t rr = 0; rr < rows; ++rr) dst[rr] = p_to_bf16_bits(base[rr * ld + n - 1]);
      for (int64_t rr = rows; rr < mr; ++rr) dst[rr] = 0;
    }
  }
}

namespace {

#if defined(__x86_64__)
// vcvtne2ps2bf16: 32 floats to 32 bf16, round to nearest even (inputs below the smallest normal
// flush to +0: an absolute error under 2^-126, far inside the error model). Only called where
// gemm_has_native_bf16() holds, i.e. on CPUs with avx512_bf16.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void round_rows_avx512_bf16(
    const float* s, int64_t ld, int64_t M, int64_t n, bf16* out) {
  for (int64_t m = 0; m < M; ++m) {
    const float* row = s + m * ld;
    uint16_t* dst = reinterpret_cast<uint16_t*>(out + m * ld);
    int64_t c = 0;
    for (; c + 32 <= n; c += 32) {
      const __m512 lo = _mm512_loadu_ps(row + c);
      const __m512 hi = _mm512_loadu_ps(row + c + 16);
      const __m512bh pair = _mm512_cvtne2ps_pbh(hi, lo);  // lo fills the low 16 elements
      _mm512_storeu_si512(reinterpret_cast<void*>(dst + c), reinterpret_cast<__m512i>(pair));
    }
    for (; c < n; ++c) dst[c] = static_cast<uint16_t>(p_to_bf16_bits(row[c]));
  }
}
#endif

}  // namespace

#if defined(__x86_64__)
namespace {

// Rows 2i and 2i+1 of P^T, 16 columns at a time: vcvtne2ps2bf16 rounds both into one vector
// [row 2i | row 2i+1] and one permute interleaves them into the 16 pairs of a strip row. An odd
// n pairs the last row with +0. Needs cols a multiple of 16 and nr of 16.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void pack_pt_pairs_avx512_bf16(
    const float* s, int64_t ld, int64_t n, int64_t cols, int64_t nr, uint32_t* out) {
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  const int64_t pairs = (n + 1) / 2;
  for (int64_t i = 0; i < pairs; ++i) {
    const float* even = s + 2 * i * ld;
    const float* odd = 2 * i + 1 < n ? even + ld : nullptr;
    for (int64_t m = 0; m < cols; m += 16) {
      const __m512 lo = _mm512_loadu_ps(even + m);
      const __m512 hi = odd ? _mm512_loadu_ps(odd + m) : _mm512_setzero_ps();
      const __m512i both = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
      uint32_t* dst = out + (m / nr) * pairs * nr + i * nr + m % nr;
      _mm512_storeu_si512(dst, _mm512_permutexvar_epi16(interleave, both));
    }
  }
}

}  // namespace
#endif

void pack_pt_pairs_rounded(const float* s, int64_t ld, int64_t n, int64_t cols, int64_t nr,
                           bf16* rounded, uint32_t* out) {
#if defined(__x86_64__)
  if (gemm_has_native_bf16() && cols % 16 == 0 && nr % 16 == 0) {
    pack_pt_pairs_avx512_bf16(s, ld, n, cols, nr, out);
    return;
  }
#endif
  for (int64_t c = 0; c < n; ++c) {
    uint16_t* dst = reinterpret_cast<uint16_t*>(rounded + c * ld);
    for (int64_t m = 0; m < cols; ++m)
      dst[m] = static_cast<uint16_t>(p_to_bf16_bits(s[c * ld + m]));
  }
  pack_rhs_panel_pairs(rounded, ld, n, cols, nr, out);
}

void pack_p_pairs_rounded(const float* s, int64_t ld, int64_t M, int64_t n, int64_t mr,
                          bf16* rounded, uint32_t* out) {
#if defined(__x86_64__)
  if (gemm_has_native_bf16()) {
    round_rows_avx512_bf16(s, ld, M, n, rounded);
    pack_lhs_block_pairs(rounded, ld, M, n, mr, out);
    return;
  }
#endif
  (void)rounded;
  pack_p_pairs(s, ld, M, n, mr, out);
}

}  // namespace tokamax
