// CPU GEMM engine: packing of lhs/rhs tiles into the micro-kernels' layouts.
//
// Dimensions.
//   rows, cols   extents of the tile being packed (rows of lhs, columns of rhs)
//   depth        its extent along K (one K block, <= tk)
//   mr, nr       the micro-tile the packed layout feeds (see micro_tile.h)
//   ld           row stride of the source array, in elements
//   L            f32 lanes of the Highway target
//
// Highway compiles this file once per x86 target (AVX-512, AVX2, scalar) and dispatches at run
// time. Each packed element feeds many multiply-adds (an rhs element every row of its task, an
// lhs element every column), so packing is a few percent of the time, but only if it runs at
// vector speed: rhs rows are widened a vector at a time, lhs micro-panels are transposed in
// registers (transpose-inl.h), and the source rows a loop reads next are prefetched (rhs
// panels come from DRAM: each group's rhs is read from memory once, by its packing).
#include "ops/common/cpu_gemm/pack.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "ops/common/cpu_gemm/micro_tile.h"
#include "ops/framework/errors.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/cpu_gemm/pack.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

#include "ops/common/cpu_gemm/transpose-inl.h"
#include "ops/common/cpu_gemm/widen-inl.h"
#include "ops/common/masked_load-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Prefetches `bytes` bytes of a source row a few rows ahead of the packing loop. The block
// product already prefetches the panel a task packs next; this covers the first panel of each
// task, which nothing could announce, with more reads in flight than the prefetchers start.
constexpr int64_t kPackPrefetchRows = 8;
inline void PrefetchRow(const void* row, int64_t bytes) {
  const char* p = static_cast<const char*>(row);
  for (int64_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(p + offset, 0, 3);
}

// Whether whole-vector stores to `dst` may bypass the caches (`stream` asked, 64-byte aligned).
inline bool CanStream(bool stream, const void* dst) {
  return stream && reinterpret_cast<uintptr_t>(dst) % 64 == 0;
}

// k outer, strips inner: each source row segment is read once, front to back, while the strips
// fill in parallel (k inner would hop a whole rhs row, N elements, between reads).
template <typename Acc, typename In>
void PackRhsPanelT(const In* HWY_RESTRICT rhs, int64_t ld, int64_t depth, int64_t cols, int64_t nr,
                   Acc* HWY_RESTRICT packed, bool stream) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  // Strips whole vectors wide (nr a multiple of L) from an aligned start: every full vector of a
  // strip row is 64-byte aligned too.
  const bool streaming = CanStream(stream, packed) && nr % L == 0;
  const int64_t strips = ceil_div(cols, nr);
  for (int64_t k = 0; k < depth; ++k) {
    const In* src = rhs + k * ld;
    if (k + kPackPrefetchRows < depth) {
      PrefetchRow(src + kPackPrefetchRows * ld, cols * static_cast<int64_t>(sizeof(In)));
    }
    for (int64_t s = 0; s < strips; ++s) {
      Acc* dst = packed + (s * depth + k) * nr;
      const int64_t c0 = s * nr, width = std::min(nr, cols - c0);
      int64_t c = 0;
      if constexpr (std::is_same_v<Acc, float> && std::is_same_v<In, float>) {
        // A strip narrower than a vector but at least half of one (nr = mr: a transposed A
        // packed into micro-panels, e.g. the attention backward's P^T): one whole vector load
        // within the row and one store, whose lanes past nr land in this strip's slot of k + 1,
        // which the next k overwrites. The last k and the row's last columns take the masked
        // path below (no write past the strip, no read past the row).
        if (nr < L && 2 * nr >= L && k + 1 < depth && c0 + L <= cols) {
          hn::StoreU(hn::LoadU(df, src + c0), df, dst);
          continue;
        }
      }
      if constexpr (std::is_same_v<Acc, float>) {
        if (kVectorConvert || std::is_same_v<In, float>) {
          if (streaming) {
            for (; c + L <= width; c += L) hn::Stream(LoadWiden(df, src + c0 + c), df, dst + c);
          }
          for (; c + L <= width; c += L) hn::StoreU(LoadWiden(df, src + c0 + c), df, dst + c);
        }
        // f32 strips narrower than a vector (nr = mr < L: a transposed A packed into micro-panels,
        // gemm.cc) or the last columns: one masked load (no read past `width`, zeros beyond it)
        // fills the rest of the strip, its zero padding included.
        if constexpr (std::is_same_v<In, float>) {
          if (c < width) {
            const int64_t fill = std::min(L, nr - c);
            const auto v = MaskedLoadFirstN(df, src + c0 + c, static_cast<size_t>(width - c));
            StoreFirstN(v, df, dst + c, static_cast<size_t>(fill));
            c += fill;
            for (; c < nr; ++c) dst[c] = Acc(0);
            continue;
          }
        }
      }
      for (; c < width; ++c) dst[c] = Widen<Acc>(src[c0 + c]);
      // Zero columns past N: they multiply into accumulators the epilogue never stores.
      for (; c < nr; ++c) dst[c] = Acc(0);
    }
  }
}

// Scalar transposition: the f64 path, targets without the register version, mr > L.
template <typename Acc, typename In>
void PackLhsScalar(const In* HWY_RESTRICT lhs, int64_t ld, int64_t rows, int64_t depth, int64_t mr,
                   Acc* HWY_RESTRICT packed) {
  const int64_t panels = ceil_div(rows, mr);
  for (int64_t p = 0; p < panels; ++p) {
    Acc* dst = packed + p * depth * mr;
    const int64_t r0 = p * mr, height = std::min(mr, rows - r0);
    for (int64_t r = 0; r < height; ++r) {
      const In* src = lhs + (r0 + r) * ld;
      for (int64_t k = 0; k < depth; ++k) dst[k * mr + r] = Widen<Acc>(src[k]);
    }
    // Zero rows past the group's end: the rows below belong to the next group (or past M).
    for (int64_t r = height; r < mr; ++r) {
      for (int64_t k = 0; k < depth; ++k) dst[k * mr + r] = Acc(0);
    }
  }
}

// `Out` is float for widened f32 panels and uint32_t for bf16 pairs (then `In` is uint32_t too
// and `depth` counts pairs).
template <typename Out, typename In>
void PackLhsBlockT(const In* HWY_RESTRICT lhs, int64_t ld, int64_t rows, int64_t depth, int64_t mr,
                   Out* HWY_RESTRICT packed, [[maybe_unused]] bool stream) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
  if constexpr (sizeof(Out) == 4) {
    // Streaming: panels a multiple of the register wide (a transposed B packed into nr-wide
    // strips) store whole registers, 64-byte aligned when the block is; narrower panels (mr =
    // 14 of 16 lanes) stage L k rows (L * mr floats: mr whole registers) in L1 and stream them
    // where that run of the panel is aligned.
    const bool streaming = CanStream(stream, packed) && mr % kTransposeLanes == 0;
    const bool staging = CanStream(stream, packed) && mr < kTransposeLanes;
    HWY_ALIGN float stage[kTransposeLanes * kTransposeLanes];
    // A panel wider than a register (mr > L: a transposed rhs packed into nr-wide strips, see
    // gemm.cc) is transposed L rows at a time into its column range [c0, c0 + chunk).
    const int64_t panels = ceil_div(rows, mr);
    for (int64_t p = 0; p < panels; ++p) {
      float* dst = reinterpret_cast<float*>(packed) + p * depth * mr;
      const int64_t r0 = p * mr, height = std::min(mr, rows - r0);
      for (int64_t c0 = 0; c0 < mr; c0 += kTransposeLanes) {
        const int64_t chunk = std::min(kTransposeLanes, mr - c0);
        for (int64_t k0 = 0; k0 < depth; k0 += kTransposeLanes) {
          const int64_t count = std::min(kTransposeLanes, depth - k0);
          TransposeVec r[kTransposeLanes];
          for (int64_t i = 0; i < kTransposeLanes; ++i) {
            // Rows past the group's end (and past mr) are zeros: the padding of the panel.
            r[i] = i < chunk && c0 + i < height ? LoadRowChunk(lhs + (r0 + c0 + i) * ld + k0, count)
                                                : TransposeVec{};
          }
          Transpose(r);
          if (streaming) {
            for (int64_t k = 0; k < count; ++k) StreamLanes(dst + (k0 + k) * mr + c0, r[k]);
            continue;
          }
          float* run = dst + k0 * mr;
          if (staging && count == kTransposeLanes && CanStream(true, run)) {
            for (int64_t k = 0; k < count; ++k) StoreLanes(stage + k * mr, chunk, r[k]);
            for (int64_t v = 0; v < mr; ++v) {
              StreamLanes(run + v * kTransposeLanes,
                          LoadAlignedLanes(stage + v * kTransposeLanes));
            }
            continue;
          }
          for (int64_t k = 0; k < count; ++k) StoreLanes(dst + (k0 + k) * mr + c0, chunk, r[k]);
        }
      }
    }
    return;
  }
#endif
  PackLhsScalar(lhs, ld, rows, depth, mr, packed);
}

template <typename Acc>
void PackRhsPanel(DType dtype, const void* rhs, int64_t ld, int64_t depth, int64_t cols, int64_t nr,
                  Acc* packed, bool stream) {
  switch (dtype) {
    case DType::kF32:
      return PackRhsPanelT(static_cast<const float*>(rhs), ld, depth, cols, nr, packed, stream);
    case DType::kBF16:
      return PackRhsPanelT(static_cast<const bf16*>(rhs), ld, depth, cols, nr, packed, stream);
    case DType::kF16:
      return PackRhsPanelT(static_cast<const f16*>(rhs), ld, depth, cols, nr, packed, stream);
    case DType::kF64:
      if constexpr (std::is_same_v<Acc, double>) {
        return PackRhsPanelT(static_cast<const double*>(rhs), ld, depth, cols, nr, packed, false);
      }
      [[fallthrough]];
    default:
      throw NotImplemented("cpu ragged_dot: cannot pack rhs of dtype " +
                           std::string(dtype_name(dtype)));
  }
}

template <typename Acc>
void PackLhsBlock(DType dtype, const void* lhs, int64_t ld, int64_t rows, int64_t depth, int64_t mr,
                  Acc* packed, bool stream) {
  switch (dtype) {
    case DType::kF32:
      return PackLhsBlockT(static_cast<const float*>(lhs), ld, rows, depth, mr, packed, stream);
    case DType::kBF16:
      return PackLhsBlockT(static_cast<const bf16*>(lhs), ld, rows, depth, mr, packed, stream);
    case DType::kF16:
      return PackLhsBlockT(static_cast<const f16*>(lhs), ld, rows, depth, mr, packed, stream);
    case DType::kF64:
      if constexpr (std::is_same_v<Acc, double>) {
        return PackLhsBlockT(static_cast<const double*>(lhs), ld, rows, depth, mr, packed, false);
      }
      [[fallthrough]];
    default:
      throw NotImplemented("cpu ragged_dot: cannot pack lhs of dtype " +
                           std::string(dtype_name(dtype)));
  }
}

void PackRhsPanelF32(DType dtype, const void* rhs, int64_t ld, int64_t depth, int64_t cols,
                     int64_t nr, float* packed, bool stream) {
  PackRhsPanel(dtype, rhs, ld, depth, cols, nr, packed, stream);
}
void PackRhsPanelF64(DType dtype, const void* rhs, int64_t ld, int64_t depth, int64_t cols,
                     int64_t nr, double* packed) {
  PackRhsPanel(dtype, rhs, ld, depth, cols, nr, packed, false);
}
void PackLhsBlockF32(DType dtype, const void* lhs, int64_t ld, int64_t rows, int64_t depth,
                     int64_t mr, float* packed, bool stream) {
  PackLhsBlock(dtype, lhs, ld, rows, depth, mr, packed, stream);
}
void PackLhsBlockF64(DType dtype, const void* lhs, int64_t ld, int64_t rows, int64_t depth,
                     int64_t mr, double* packed) {
  PackLhsBlock(dtype, lhs, ld, rows, depth, mr, packed, false);
}

// Two consecutive k of one lhs row are adjacent in memory, so a pair is one 32-bit element and
// the pair layout is the f32 transposition of the row viewed as 32-bit words. An odd depth leaves
// a last pair (lhs[depth - 1], +0) that is written separately.
void PackLhsBlockPairs(const bf16* HWY_RESTRICT lhs, int64_t ld, int64_t rows, int64_t depth,
                       int64_t mr, uint32_t* HWY_RESTRICT packed, bool stream) {
  const int64_t pairs = ceil_div(depth, 2), panels = ceil_div(rows, mr);
  if (ld % 2 == 0 && depth % 2 == 0 && reinterpret_cast<uintptr_t>(lhs) % 4 == 0) {
    PackLhsBlockT(reinterpret_cast<const uint32_t*>(lhs), ld / 2, rows, pairs, mr, packed,
                  stream);
    return;
  }
  for (int64_t p = 0; p < panels; ++p) {
    uint32_t* dst = packed + p * pairs * mr;
    const int64_t r0 = p * mr, height = std::min(mr, rows - r0);
    for (int64_t r = 0; r < height; ++r) {
      const bf16* src = lhs + (r0 + r) * ld;
      for (int64_t i = 0; i < depth / 2; ++i) {
        uint32_t pair;
        std::memcpy(&pair, src + 2 * i, sizeof(pair));  // little endian: k = 2i in the low half
        dst[i * mr + r] = pair;
      }
      if (depth % 2) dst[(pairs - 1) * mr + r] = src[depth - 1].bits;  // pad k = depth with 0
    }
    for (int64_t r = height; r < mr; ++r) {
      for (int64_t i = 0; i < pairs; ++i) dst[i * mr + r] = 0;
    }
  }
}

// rhs rows 2i and 2i+1 interleaved column by column: zero-extend both to 32 bits and merge the
// odd row into the high halves, L columns at a time.
void PackRhsPanelPairs(const bf16* HWY_RESTRICT rhs, int64_t ld, int64_t depth, int64_t cols,
                       int64_t nr, uint32_t* HWY_RESTRICT packed, bool stream) {
  const hn::RebindToUnsigned<DF> du32;
  const hn::Rebind<uint16_t, DF> du16;
  const int64_t L = static_cast<int64_t>(hn::Lanes(du32));
  const bool streaming = CanStream(stream, packed) && nr % L == 0;
  const int64_t pairs = ceil_div(depth, 2), strips = ceil_div(cols, nr);
  for (int64_t i = 0; i < pairs; ++i) {
    const uint16_t* even = reinterpret_cast<const uint16_t*>(rhs + 2 * i * ld);
    const bool has_odd = 2 * i + 1 < depth;
    const uint16_t* odd = has_odd ? even + ld : nullptr;
    if (2 * i + kPackPrefetchRows + 1 < depth) {
      PrefetchRow(even + kPackPrefetchRows * ld, 2 * cols);
      PrefetchRow(even + (kPackPrefetchRows + 1) * ld, 2 * cols);
    }
    for (int64_t s = 0; s < strips; ++s) {
      uint32_t* dst = packed + (s * pairs + i) * nr;
      const int64_t c0 = s * nr, width = std::min(nr, cols - c0);
      int64_t c = 0;
      for (; c + L <= width; c += L) {
        const auto lo = hn::PromoteTo(du32, hn::LoadU(du16, even + c0 + c));
        const auto hi =
            has_odd ? hn::PromoteTo(du32, hn::LoadU(du16, odd + c0 + c)) : hn::Zero(du32);
        if (streaming) {
          hn::Stream(hn::Or(lo, hn::ShiftLeft<16>(hi)), du32, dst + c);
        } else {
          hn::StoreU(hn::Or(lo, hn::ShiftLeft<16>(hi)), du32, dst + c);
        }
      }
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
      // The last columns (all of a strip narrower than a vector: a transposed A packed into
      // micro-panels) by masked loads: AVX-512BW's masked 16-bit loads read nothing past `width`.
      if (c < width) {
        const auto m16 = hn::FirstN(du16, static_cast<size_t>(width - c));
        const auto lo = hn::PromoteTo(du32, hn::MaskedLoad(m16, du16, even + c0 + c));
        const auto hi = has_odd ? hn::PromoteTo(du32, hn::MaskedLoad(m16, du16, odd + c0 + c))
                                : hn::Zero(du32);
        const int64_t fill = std::min(L, nr - c);
        hn::BlendedStore(hn::Or(lo, hn::ShiftLeft<16>(hi)),
                         hn::FirstN(du32, static_cast<size_t>(fill)), du32, dst + c);
        c += fill;
      }
#endif
      for (; c < width; ++c) {
        dst[c] = uint32_t{even[c0 + c]} | (has_odd ? uint32_t{odd[c0 + c]} << 16 : 0u);
      }
      for (; c < nr; ++c) dst[c] = 0;
    }
  }
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(PackRhsPanelF32);
HWY_EXPORT(PackRhsPanelF64);
HWY_EXPORT(PackLhsBlockF32);
HWY_EXPORT(PackLhsBlockF64);
HWY_EXPORT(PackLhsBlockPairs);
HWY_EXPORT(PackRhsPanelPairs);

void pack_lhs_block(DType dtype, const void* lhs, int64_t ld, int64_t rows, int64_t depth,
                    int64_t mr, float* packed, bool stream) {
  HWY_DYNAMIC_DISPATCH(PackLhsBlockF32)(dtype, lhs, ld, rows, depth, mr, packed, stream);
}
void pack_lhs_block(DType dtype, const void* lhs, int64_t ld, int64_t rows, int64_t depth,
                    int64_t mr, double* packed) {
  HWY_DYNAMIC_DISPATCH(PackLhsBlockF64)(dtype, lhs, ld, rows, depth, mr, packed);
}
void pack_rhs_panel(DType dtype, const void* rhs, int64_t ld, int64_t depth, int64_t cols,
                    int64_t nr, float* packed, bool stream) {
  HWY_DYNAMIC_DISPATCH(PackRhsPanelF32)(dtype, rhs, ld, depth, cols, nr, packed, stream);
}
void pack_rhs_panel(DType dtype, const void* rhs, int64_t ld, int64_t depth, int64_t cols,
                    int64_t nr, double* packed) {
  HWY_DYNAMIC_DISPATCH(PackRhsPanelF64)(dtype, rhs, ld, depth, cols, nr, packed);
}
void pack_lhs_block_pairs(const bf16* lhs, int64_t ld, int64_t rows, int64_t depth, int64_t mr,
                          uint32_t* packed, bool stream) {
  HWY_DYNAMIC_DISPATCH(PackLhsBlockPairs)(lhs, ld, rows, depth, mr, packed, stream);
}
void pack_rhs_panel_pairs(const bf16* rhs, int64_t ld, int64_t depth, int64_t cols, int64_t nr,
                          uint32_t* packed, bool stream) {
  HWY_DYNAMIC_DISPATCH(PackRhsPanelPairs)(rhs, ld, depth, cols, nr, packed, stream);
}

}  // namespace tokamax
#endif  // HWY_ONCE
