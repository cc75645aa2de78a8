// ragged_dot on CPU: the register-blocked micro-kernels and the task loop that feeds them.
//
// Dimensions.
//   G      groups (experts)
//   M      rows of lhs (tokens), split into consecutive groups by group_sizes
//   K      contraction extent
//   N      output features
//   rows   sum(group_sizes) <= M; output rows past it are zero
//   tm, tn, tk, task_n   tile extents (from the work list, see cpu_tiling.h)
//   mr, nr               the micro-tile: mr rows x nr = NRV * L columns of accumulators
//   L      lanes of one vector of the accumulation type (f32: 16 on AVX-512, 8 on AVX2)
//   depth  K extent of the current block (<= tk); pairs = ceil(depth / 2) for bf16 pairs
//
// GotoBLAS/BLIS structure. A task owns output rows [m_start, m_end) of one group and columns
// [n_start, n_end); for each K block it
//   1. packs its lhs rows [rows, depth] into k-major micro-panels (L2/L3: reused by every
//      column of the task, so the transposition is paid once per K block, not per panel);
//   2. for each panel of tn columns packs rhs [depth, tn] into nr-wide strips (L2: reused by
//      every micro-panel of the task), widening bf16/f16 to f32 once per element;
//   3. runs the micro-kernel over (micro-panel, strip) pairs: mr x NRV accumulator vectors stay
//      in registers for the whole depth; each k step loads NRV rhs vectors, broadcasts mr lhs
//      values and issues mr * NRV FMAs, so loads per FMA are (mr + NRV) / (mr * NRV).
// The K block loop is outermost so that only one rhs panel is live per thread; the partial sums
// go straight to an f32 output (or to an f32 scratch that is rounded to bf16/f16 at the end).
// Variants of step 2-3: bf16 x bf16 with bf16_path=native_dot packs both operands as bf16 pairs
// for vdpbf16ps (MicroTileBf16); tasks of one micro-panel read rhs in place (no copy for a
// single use), and tasks of <= kCpuStreamRows rows stream it row by row (StreamRowsT).
#include "ops/ragged_dot/cpu_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

#include "backends/cpu/cpu_info.h"
#include "backends/cpu/thread_pool.h"
#include "ops/errors.h"
#include "ops/ragged_dot/cpu_pack.h"

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/ragged_dot/cpu_kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#ifndef TOKAMAX_RAGGED_DOT_CPU_KERNEL_ONCE
#define TOKAMAX_RAGGED_DOT_CPU_KERNEL_ONCE
namespace tokamax {
// The source rows of the rhs panel a task will pack next: `rows` rows of `bytes` bytes, `stride`
// bytes apart. The block product spreads L2 prefetches of it over its micro-tiles, so the next
// panel's DRAM reads overlap this panel's FMAs instead of stalling its packing (one group's rhs
// is read from memory exactly once, and in MoE layers it is most of the bytes).
struct PrefetchPlan {
  const char* base = nullptr;
  int64_t rows = 0, stride = 0, bytes = 0;
};

class PrefetchCursor {
 public:
  PrefetchCursor(const PrefetchPlan& plan, int64_t steps) : plan_(plan) {
    const int64_t lines = plan.rows * ((plan.bytes + kLine - 1) / kLine);
    per_step_ = steps > 0 ? (lines + steps - 1) / steps : 0;
  }
  // Prefetches the next share of the lines into L2 (locality 2: not L1, which holds the
  // micro-kernel's operands).
  void step() {
    for (int64_t i = 0; i < per_step_ && row_ < plan_.rows; ++i) {
      __builtin_prefetch(plan_.base + row_ * plan_.stride + offset_, 0, 2);
      offset_ += kLine;
      if (offset_ >= plan_.bytes) {
        offset_ = 0;
        ++row_;
      }
    }
  }

 private:
  static constexpr int64_t kLine = 64;
  PrefetchPlan plan_;
  int64_t per_step_ = 0, row_ = 0, offset_ = 0;
};

// One call of the block product: every (micro-panel, strip) pair of a packed lhs block against
// an rhs panel, packed or read in place.
struct BlockArgs {
  const void* lhs_block;  // packed lhs block [ceil(rows / mr)][depth][mr] (or bf16 pairs)
  int64_t rows;
  const void* rhs;           // packed panel [strips][depth][nr], or rhs [depth, ldb] in place
  DType rhs_dtype;           // of `rhs` when in place; packed panels are of the accumulator type
  bool rhs_packed;           // in place: `cols` must be whole strips (no read past N)
  int64_t rhs_strip_stride;  // elements from one strip to the next: depth * nr, or nr in place
  int64_t ldb;               // elements from one k row to the next: nr, or N in place
  int64_t cols;
  int64_t depth;
  void* out;  // [rows, cols] accumulators of the accumulation type, row stride ldc
  int64_t ldc;
  bool accumulate;  // add to `out` (later K blocks) instead of overwriting it (first block)
  int mr, nr_vectors;
  PrefetchPlan next_rhs;  // what the task reads next (empty: nothing to prefetch)
};

// One call of the streaming kernel for tasks of at most kStreamRows rows: lhs rows times rhs
// [K, cols] read in place, row after row, over all of K.
struct StreamArgs {
  const void* lhs;  // [rows, K] lhs_dtype, row stride K
  DType lhs_dtype;
  int64_t rows;
  const void* rhs;  // [K, cols] rhs_dtype, row stride ldb
  DType rhs_dtype;
  int64_t ldb;
  int64_t K, cols;
  float* out;  // [rows, cols] f32, row stride ldc; overwritten
  int64_t ldc;
};
inline constexpr int64_t kStreamRows = kCpuStreamRows;
}  // namespace tokamax
#endif

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// One vector of consecutive rhs columns, widened to the accumulation type.
template <class D, typename BT>
HWY_INLINE hn::Vec<D> LoadRhs(D d, const BT* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<BT, hn::TFromD<D>>) {
    return hn::LoadU(d, p);
  } else if constexpr (std::is_same_v<BT, bf16>) {
    // bf16 -> f32 is a 16-bit shift: cheap enough to run per FMA when rhs is read in place.
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::bfloat16_t, D>(),
                                      reinterpret_cast<const hwy::bfloat16_t*>(p)));
  } else {
    return hn::PromoteTo(
        d, hn::LoadU(hn::Rebind<hwy::float16_t, D>(), reinterpret_cast<const hwy::float16_t*>(p)));
  }
}

// out[rows, cols] (+)= lhs_panel[depth][MR] @ rhs_strip[depth][NRV * L], every output summing
// its k terms in k order. The MR x NRV accumulators are named by compile-time indices only, so
// the compiler keeps all of them in registers across the k loop (no spills: see the shape
// tables in cpu_tiling.h).
template <int MR, int NRV, class D, typename BT>
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
    for (int v = 0; v < NRV; ++v) b[v] = LoadRhs(d, rhs + k * ldb + v * L);
    const T* a = lhs + k * MR;
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
        const auto mask = hn::FirstN(d, static_cast<size_t>(valid));
        const hn::Vec<D> sum =
            accumulate ? hn::Add(acc[r][v], hn::MaskedLoad(mask, d, dst)) : acc[r][v];
        hn::BlendedStore(sum, mask, d, dst);
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
      MicroTile<MR, NRV>(d, lhs + p * args.depth * MR, rhs + s * args.rhs_strip_stride, args.ldb,
                         args.depth, out + p * MR * args.ldc + s * NR, args.ldc, rows,
                         std::min<int64_t>(NR, args.cols - s * NR), args.accumulate);
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

// --- Streaming kernel for tasks of few rows (decode-like MoE: 1-4 tokens per expert). --------
// Each rhs element feeds at most kStreamRows multiply-adds, so the task is bound by reading rhs
// from memory, and what matters is reading it at full bandwidth: rhs is walked row after row
// over the task's whole column range, 4 rows at a time, i.e. 4 long sequential streams the
// hardware prefetchers follow (strips of a few columns each would hop 8 KB between 128-byte
// reads). The partial sums live in the output row (L1/L2: cols * 4 bytes per lhs row) and are
// updated once per 4 k instead of once per k.
constexpr int64_t kPrefetchRows = 8;

template <int ROWS, typename BT, typename LT>
void StreamRowsT(const StreamArgs& args) {
  const DF d;
  constexpr int64_t L = static_cast<int64_t>(hn::MaxLanes(DF()));
  const LT* lhs = static_cast<const LT*>(args.lhs);
  const BT* rhs = static_cast<const BT*>(args.rhs);
  const int64_t K = args.K, cols = args.cols, ldb = args.ldb, ldc = args.ldc;
  float* out = args.out;
  for (int r = 0; r < ROWS; ++r) std::fill_n(out + r * ldc, cols, 0.0f);
  auto widen = [](LT x) { return static_cast<float>(to_double(x)); };
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    const BT* b0 = rhs + k * ldb;
    hn::Vec<DF> a[ROWS][4];
    float a_scalar[ROWS][4];
    for (int r = 0; r < ROWS; ++r) {
      for (int j = 0; j < 4; ++j) {
        a_scalar[r][j] = widen(lhs[r * K + k + j]);
        a[r][j] = hn::Set(d, a_scalar[r][j]);
      }
    }
    int64_t c = 0;
    for (; c + L <= cols; c += L) {
      // Software prefetch two row groups ahead: the hardware streams ramp up per 4 KiB page,
      // and each rhs row crosses a page every 2-4 KiB here; +3-5% of the bandwidth measured.
      if (k + kPrefetchRows + 4 <= K) {
        for (int j = 0; j < 4; ++j) hwy::Prefetch(b0 + (kPrefetchRows + j) * ldb + c);
      }
      const auto v0 = LoadRhs(d, b0 + c), v1 = LoadRhs(d, b0 + ldb + c);
      const auto v2 = LoadRhs(d, b0 + 2 * ldb + c), v3 = LoadRhs(d, b0 + 3 * ldb + c);
      for (int r = 0; r < ROWS; ++r) {
        float* o = out + r * ldc + c;
        // Two chains per row: the accumulator round trip through L1 is the latency to hide.
        auto s0 = hn::MulAdd(a[r][0], v0, hn::LoadU(d, o));
        auto s1 = hn::Mul(a[r][1], v1);
        s0 = hn::MulAdd(a[r][2], v2, s0);
        s1 = hn::MulAdd(a[r][3], v3, s1);
        hn::StoreU(hn::Add(s0, s1), d, o);
      }
    }
    for (; c < cols; ++c) {  // the last cols % L columns
      for (int r = 0; r < ROWS; ++r) {
        float sum = out[r * ldc + c];
        for (int j = 0; j < 4; ++j) {
          sum += a_scalar[r][j] * static_cast<float>(to_double(b0[j * ldb + c]));
        }
        out[r * ldc + c] = sum;
      }
    }
  }
  for (; k < K; ++k) {  // the last K % 4 rows of rhs
    const BT* b = rhs + k * ldb;
    for (int r = 0; r < ROWS; ++r) {
      const float a_r = widen(lhs[r * K + k]);
      const auto a_v = hn::Set(d, a_r);
      int64_t c = 0;
      for (; c + L <= cols; c += L) {
        float* o = out + r * ldc + c;
        hn::StoreU(hn::MulAdd(a_v, LoadRhs(d, b + c), hn::LoadU(d, o)), d, o);
      }
      for (; c < cols; ++c) out[r * ldc + c] += a_r * static_cast<float>(to_double(b[c]));
    }
  }
}

template <typename BT, typename LT>
void StreamRowsRows(const StreamArgs& args) {
  switch (args.rows) {
    case 1:
      return StreamRowsT<1, BT, LT>(args);
    case 2:
      return StreamRowsT<2, BT, LT>(args);
    case 3:
      return StreamRowsT<3, BT, LT>(args);
    default:
      return StreamRowsT<4, BT, LT>(args);
  }
}

template <typename BT>
bool StreamRowsLhs(const StreamArgs& args) {
  switch (args.lhs_dtype) {
    case DType::kF32:
      return StreamRowsRows<BT, float>(args), true;
    case DType::kBF16:
      return StreamRowsRows<BT, bf16>(args), true;
    case DType::kF16:
      return StreamRowsRows<BT, f16>(args), true;
    default:
      return false;
  }
}

bool StreamRowsF32(const StreamArgs& args) {
  if (args.rows < 1 || args.rows > kStreamRows) return false;
  switch (args.rhs_dtype) {
    case DType::kF32:
      return StreamRowsLhs<float>(args);
    case DType::kBF16:
      return StreamRowsLhs<bf16>(args);
    case DType::kF16:
      return StreamRowsLhs<f16>(args);
    default:
      return false;
  }
}

int F32Lanes() { return kF32Lanes; }
int F64Lanes() { return static_cast<int>(hn::MaxLanes(hn::ScalableTag<double>())); }
const char* KernelTargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#if HWY_ARCH_X86
#include <immintrin.h>
#endif

namespace tokamax {

HWY_EXPORT(BlockProductF32);
HWY_EXPORT(BlockProductF64);
HWY_EXPORT(StreamRowsF32);
HWY_EXPORT(F32Lanes);
HWY_EXPORT(F64Lanes);
HWY_EXPORT(KernelTargetName);

namespace {

#if HWY_ARCH_X86
// --- Native bf16: vdpbf16ps on pair-packed operands (AVX-512 BF16 only). -------------------
// Each instruction does 16 lanes x 2 products (k = 2i and 2i+1) into f32 accumulators, twice
// the multiply-adds of an f32 FMA; whether it is also twice as fast depends on the core (on
// AVX-512 Xeons it issues at about half the FMA rate), which is why the config offers both
// paths and the tuner measures. Compiled for avx512bf16 and called only when the CPU has it.
#define TOKAMAX_TARGET_BF16 __attribute__((target("avx512f,avx512bf16")))

template <int MR, int NRV>
TOKAMAX_TARGET_BF16 void MicroTileBf16(const uint32_t* __restrict lhs,  // [pairs][MR]
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
          reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(lhs[i * MR + r])));
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
      MicroTileBf16<MR, NRV>(lhs + p * pairs * MR, rhs + s * pairs * NR, pairs,
                             out + p * MR * args.ldc + s * NR, args.ldc, rows,
                             std::min<int64_t>(NR, args.cols - s * NR), args.accumulate);
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

constexpr size_t kAlignment = 64;  // a cache line; also the widest SIMD register (AVX-512)

size_t align_up(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// Per-thread scratch that only grows. Pool threads are persistent, so after the first call a
// kernel launch allocates nothing: fresh multi-megabyte allocations would come from mmap and
// page-fault on first touch, a cost that shows up on every small call.
char* thread_scratch(size_t bytes) {
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buffer;
  if (bytes > buffer.bytes) {
    std::free(buffer.data);
    buffer.bytes = 0;
    buffer.data = std::aligned_alloc(kAlignment, align_up(bytes));
    if (buffer.data == nullptr) throw std::bad_alloc();
    buffer.bytes = align_up(bytes);
  }
  return static_cast<char*>(buffer.data);
}

// Everything a task needs besides its coordinates; shared read-only by all threads.
struct Launch {
  const RaggedDotWorkList* work;
  CpuKernelOptions options;
  int64_t K, N;
  const char* lhs;  // [M, K] lhs_dtype
  const char* rhs;  // [G, K, N] rhs_dtype
  char* out;        // [M, N] out_dtype
  DType lhs_dtype, rhs_dtype, out_dtype;
  int64_t nr;           // micro-tile columns in accumulator lanes
  TaskScratch scratch;  // element counts, in the accumulation type
};

void block_product(BlockArgs& args, bool f64) {
  const bool ok = f64 ? HWY_DYNAMIC_DISPATCH(BlockProductF64)(args)
                      : HWY_DYNAMIC_DISPATCH(BlockProductF32)(args);
  if (!ok) {
    throw NotImplemented("cpu ragged_dot: no " + std::to_string(args.mr) + "x" +
                         std::to_string(args.nr_vectors) + " micro-kernel for this SIMD target");
  }
}

template <typename Acc>
void run_task(const Launch& launch, const RaggedDotTask& task) {
  const RaggedDotWorkList& work = *launch.work;
  const CpuKernelOptions& options = launch.options;
  const int64_t K = launch.K, N = launch.N, nr = launch.nr, mr = options.mr;
  const size_t out_size = dtype_size(launch.out_dtype);
  const int64_t rows = task.m_end - task.m_start, task_cols = task.n_end - task.n_start;
  char* out_tile = launch.out + (task.m_start * N + task.n_start) * out_size;
  if (task.group == kZeroRowsTask || K == 0) {
    // +0.0 is all-zero bits in every float dtype, so zeroing is a memset per row.
    for (int64_t r = 0; r < rows; ++r)
      std::memset(out_tile + r * N * out_size, 0, task_cols * out_size);
    return;
  }
  constexpr bool f64 = std::is_same_v<Acc, double>;
  // Accumulate straight into the output when it has the accumulator's type; otherwise into an
  // f32 scratch rounded to the output dtype once, after the last K block.
  const bool in_place = launch.out_dtype == (f64 ? DType::kF64 : DType::kF32);
  const TaskScratch& sizes = launch.scratch;
  char* scratch = thread_scratch(
      sizeof(Acc) * (align_up(sizes.lhs_block) + align_up(sizes.rhs_panel) + sizes.acc));
  Acc* lhs_block = reinterpret_cast<Acc*>(scratch);
  Acc* rhs_panel = lhs_block + align_up(sizes.lhs_block);
  Acc* acc = in_place ? reinterpret_cast<Acc*>(out_tile) : rhs_panel + align_up(sizes.rhs_panel);
  const int64_t ldc = in_place ? N : work.task_n;

  const size_t lhs_size = dtype_size(launch.lhs_dtype), rhs_size = dtype_size(launch.rhs_dtype);
  const char* lhs_rows = launch.lhs + task.m_start * K * lhs_size;
  const char* rhs_g = launch.rhs + task.group * K * N * rhs_size;
  // A task of one micro-panel reads each rhs element once: packing would copy it for nothing.
  const bool in_place_rhs = !f64 && !options.native_bf16 && (!options.pack_rhs || rows <= mr);
  if (in_place_rhs && rows <= kStreamRows) {
    StreamArgs args{};
    args.lhs = lhs_rows;
    args.lhs_dtype = launch.lhs_dtype;
    args.rows = rows;
    args.rhs = rhs_g + task.n_start * rhs_size;
    args.rhs_dtype = launch.rhs_dtype;
    args.ldb = N;
    args.K = K;
    args.cols = task_cols;
    args.out = reinterpret_cast<float*>(acc);
    args.ldc = ldc;
    if (!HWY_DYNAMIC_DISPATCH(StreamRowsF32)(args)) {
      throw NotImplemented("cpu ragged_dot: no streaming kernel for these dtypes");
    }
    if (!in_place) {
      store_rows(reinterpret_cast<const float*>(acc), ldc, rows, task_cols, launch.out_dtype,
                 out_tile, N);
    }
    return;
  }

  for (int64_t k_i = 0; k_i < work.nk; ++k_i) {
    const int64_t k0 = k_i * work.tk, depth = std::min(work.tk, K - k0);
    BlockArgs args{};
    args.lhs_block = lhs_block;
    args.rows = rows;
    args.depth = depth;
    args.ldc = ldc;
    args.accumulate = k_i > 0;
    args.mr = options.mr;
    args.nr_vectors = options.nr_vectors;
    if (options.native_bf16) {
      pack_lhs_block_pairs(reinterpret_cast<const bf16*>(lhs_rows) + k0, K, rows, depth, mr,
                           reinterpret_cast<uint32_t*>(lhs_block));
    } else {
      pack_lhs_block(launch.lhs_dtype, lhs_rows + k0 * lhs_size, K, rows, depth, mr, lhs_block);
    }
    for (int64_t n0 = task.n_start; n0 < task.n_end; n0 += work.tn) {
      const int64_t cols = std::min(work.tn, task.n_end - n0);
      const char* rhs_block = rhs_g + (k0 * N + n0) * rhs_size;
      args.out = acc + (n0 - task.n_start);
      // The panel after this one: the next columns of this K block, or the first of the next.
      const int64_t next_n0 = n0 + work.tn < task.n_end ? n0 + work.tn : task.n_start;
      const int64_t next_k0 = n0 + work.tn < task.n_end ? k0 : k0 + work.tk;
      args.next_rhs = {};
      if (next_k0 < K) {
        args.next_rhs.base = rhs_g + (next_k0 * N + next_n0) * rhs_size;
        args.next_rhs.rows = std::min(work.tk, K - next_k0);
        args.next_rhs.stride = N * static_cast<int64_t>(rhs_size);
        args.next_rhs.bytes = std::min(work.tn, task.n_end - next_n0) * rhs_size;
      }
      if (options.native_bf16) {
        pack_rhs_panel_pairs(reinterpret_cast<const bf16*>(rhs_block), N, depth, cols, nr,
                             reinterpret_cast<uint32_t*>(rhs_panel));
        args.rhs = rhs_panel;
        args.cols = cols;
        if (!RunShapeBf16(args)) throw NotImplemented("cpu ragged_dot: no such bf16 micro-kernel");
        continue;
      }
      int64_t packed_from = 0;  // columns [packed_from, cols) go through a packed panel
      if (in_place_rhs) {
        // Whole strips in place; the last partial strip is packed so nothing past N is read.
        packed_from = cols / nr * nr;
        if (packed_from > 0) {
          args.rhs = rhs_block;
          args.rhs_dtype = launch.rhs_dtype;
          args.rhs_packed = false;
          args.rhs_strip_stride = nr;
          args.ldb = N;
          args.cols = packed_from;
          block_product(args, f64);
        }
      }
      if (packed_from < cols) {
        pack_rhs_panel(launch.rhs_dtype, rhs_block + packed_from * rhs_size, N, depth,
                       cols - packed_from, nr, rhs_panel);
        args.rhs = rhs_panel;
        args.rhs_packed = true;
        args.rhs_strip_stride = depth * nr;
        args.ldb = nr;
        args.cols = cols - packed_from;
        args.out = acc + (n0 - task.n_start) + packed_from;
        block_product(args, f64);
      }
    }
  }
  if (!in_place) {
    store_rows(reinterpret_cast<const float*>(acc), ldc, rows, task_cols, launch.out_dtype,
               out_tile, N);
  }
}

void check_shape(const HostTensor& tensor, const std::vector<int64_t>& dims, const char* name) {
  if (tensor.dims() != dims) {
    throw InvalidArgument(std::string("ragged_dot cpu kernel: ") + name + " is " +
                              tensor.spec().to_string() + ", which does not match the problem",
                          name);
  }
}

}  // namespace

int cpu_kernel_f32_lanes() { return HWY_DYNAMIC_DISPATCH(F32Lanes)(); }
const char* cpu_kernel_target_name() { return HWY_DYNAMIC_DISPATCH(KernelTargetName)(); }

bool cpu_kernel_has_native_bf16() {
#if HWY_ARCH_X86
  return cpu::host_device().has("avx512_bf16") && cpu_kernel_f32_lanes() >= 16;
#else
  return false;
#endif
}

void ragged_dot_cpu_kernel(const RaggedDotProblem& p, const RaggedDotWorkList& work,
                           const CpuKernelOptions& options, const HostTensor& lhs,
                           const HostTensor& rhs, HostTensor& out) {
  check_shape(lhs, {p.M, p.K}, "lhs");
  check_shape(rhs, {p.G, p.K, p.N}, "rhs");
  check_shape(out, {p.M, p.N}, "out");
  const bool f64 = out.dtype() == DType::kF64;
  if (!f64 && (lhs.dtype() == DType::kF64 || rhs.dtype() == DType::kF64)) {
    throw NotImplemented("cpu ragged_dot: f64 inputs need an f64 output");
  }
  Launch launch{};
  launch.work = &work;
  launch.options = options;
  launch.K = p.K;
  launch.N = p.N;
  launch.lhs = static_cast<const char*>(lhs.raw());
  launch.rhs = static_cast<const char*>(rhs.raw());
  launch.out = static_cast<char*>(out.raw());
  launch.lhs_dtype = lhs.dtype();
  launch.rhs_dtype = rhs.dtype();
  launch.out_dtype = out.dtype();
  if (f64) {
    // The f64 path runs the first shape of the table in f64 lanes.
    const MicroKernelShape shape = micro_kernel_shapes(cpu_kernel_f32_lanes())[0];
    launch.options.mr = shape.mr;
    launch.options.nr_vectors = shape.nr_vectors;
    launch.options.native_bf16 = false;
    launch.nr = int64_t{shape.nr_vectors} * HWY_DYNAMIC_DISPATCH(F64Lanes)();
  } else {
    if (!has_micro_kernel_shape(cpu_kernel_f32_lanes(), options.mr, options.nr_vectors)) {
      throw NotImplemented("cpu ragged_dot: no " + std::to_string(options.mr) + "x" +
                           std::to_string(options.nr_vectors) + " micro-kernel for the " +
                           cpu_kernel_target_name() + " target");
    }
    launch.nr = int64_t{options.nr_vectors} * cpu_kernel_f32_lanes();
  }
  if (launch.options.native_bf16) {
    if (!cpu_kernel_has_native_bf16()) {
      throw NotImplemented("cpu ragged_dot: native_dot needs a CPU with avx512_bf16");
    }
    if (lhs.dtype() != DType::kBF16 || rhs.dtype() != DType::kBF16) {
      throw NotImplemented("cpu ragged_dot: native_dot needs bf16 lhs and rhs");
    }
  }
  launch.scratch = task_scratch(work, launch.options.mr, launch.nr,
                                out.dtype() != (f64 ? DType::kF64 : DType::kF32));
  cpu::parallel_for(static_cast<int64_t>(work.tasks.size()), options.num_threads,
                    [&](int64_t task, int /*thread*/) {
                      const RaggedDotTask& t = work.tasks[static_cast<size_t>(task)];
                      if (f64) {
                        run_task<double>(launch, t);
                      } else {
                        run_task<float>(launch, t);
                      }
                    });
}

}  // namespace tokamax
#endif  // HWY_ONCE
