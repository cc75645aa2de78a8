// CPU GEMM engine: the streaming kernel for tasks of a few rows, compiled once per SIMD target.
//
// Dimensions.
//   K      contraction extent (all of it: one call covers the task's whole K)
//   rows   rows of lhs of the task, 1..kCpuStreamRows
//   cols   output columns of the task
//   L      f32 lanes of the Highway target (16 on AVX-512, 8 on AVX2)
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ops/common/cpu_gemm/micro_kernel.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/cpu_gemm/stream_kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include "ops/common/cpu_gemm/widen-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// --- Streaming kernel for tasks of few rows (decode-like MoE: 1-4 tokens per expert). --------
// Each rhs element feeds at most kCpuStreamRows multiply-adds, so the task is bound by reading rhs
// from memory, and what matters is reading it at full bandwidth: rhs is walked row after row
// over the task's whole column range, 4 rows at a time, i.e. 4 long sequential streams the
// hardware prefetchers follow (strips of a few columns each would hop 8 KB between 128-byte
// reads). The partial sums live in the output row (L1/L2: cols * 4 bytes per lhs row) and are
// updated once per 4 k instead of once per k.
constexpr int64_t kPrefetchRows = 8;

// rhs elements as f32: widened, or (quantized BT) decoded and times their scales.
template <typename BT>
constexpr bool kQuantized = std::is_same_v<BT, int8_t> || std::is_same_v<BT, f8e4m3>;

template <typename BT>
struct RhsReader {
  const StreamArgs& args;
  const float* scale_row(int64_t k) const {
    return args.scale + (k / args.scale_block) * args.scale_ld;
  }
  HWY_INLINE hn::Vec<DF> load(const BT* row, int64_t k, int64_t c) const {
    if constexpr (kQuantized<BT>) {
      return hn::Mul(LoadDecode(DF(), row + c), hn::LoadU(DF(), scale_row(k) + c));
    } else {
      return LoadWiden(DF(), row + c);
    }
  }
  float scalar(const BT* row, int64_t k, int64_t c) const {
    if constexpr (kQuantized<BT>) {
      return DecodeCode(row[c]) * scale_row(k)[c];
    } else {
      return static_cast<float>(to_double(row[c]));
    }
  }
};

template <int ROWS, typename BT, typename LT>
void StreamRowsT(const StreamArgs& args) {
  const DF d;
  constexpr int64_t L = static_cast<int64_t>(hn::MaxLanes(DF()));
  const LT* lhs = static_cast<const LT*>(args.lhs);
  const BT* rhs = static_cast<const BT*>(args.rhs);
  const int64_t K = args.K, cols = args.cols, ldb = args.ldb, ldc = args.ldc;
  const int64_t lda = args.lda > 0 ? args.lda : K;
  const RhsReader<BT> read{args};
  float* out = args.out;
  if (!args.accumulate) {
    for (int r = 0; r < ROWS; ++r) std::fill_n(out + r * ldc, cols, 0.0f);
  }
  auto widen = [](LT x) { return static_cast<float>(to_double(x)); };
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    const BT* b0 = rhs + k * ldb;
    hn::Vec<DF> a[ROWS][4];
    float a_scalar[ROWS][4];
    for (int r = 0; r < ROWS; ++r) {
      for (int j = 0; j < 4; ++j) {
        a_scalar[r][j] = widen(lhs[r * lda + k + j]);
        a[r][j] = hn::Set(d, a_scalar[r][j]);
      }
    }
    int64_t c = 0;
    for (; c + L <= cols; c += L) {
      // Software prefetch two row groups ahead: the hardware streams ramp up per 4 KiB page,
      // and each rhs row crosses a page every 2-4 KiB here (measured: docs/measurement_log.md,
      // "streaming kernel prefetch").
      if (k + kPrefetchRows + 4 <= K) {
        for (int j = 0; j < 4; ++j) hwy::Prefetch(b0 + (kPrefetchRows + j) * ldb + c);
      }
      const auto v0 = read.load(b0, k, c), v1 = read.load(b0 + ldb, k + 1, c);
      const auto v2 = read.load(b0 + 2 * ldb, k + 2, c), v3 = read.load(b0 + 3 * ldb, k + 3, c);
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
        for (int j = 0; j < 4; ++j) sum += a_scalar[r][j] * read.scalar(b0 + j * ldb, k + j, c);
        out[r * ldc + c] = sum;
      }
    }
  }
  for (; k < K; ++k) {  // the last K % 4 rows of rhs
    const BT* b = rhs + k * ldb;
    for (int r = 0; r < ROWS; ++r) {
      const float a_r = widen(lhs[r * lda + k]);
      const auto a_v = hn::Set(d, a_r);
      int64_t c = 0;
      for (; c + L <= cols; c += L) {
        float* o = out + r * ldc + c;
        hn::StoreU(hn::MulAdd(a_v, read.load(b, k, c), hn::LoadU(d, o)), d, o);
      }
      for (; c < cols; ++c) out[r * ldc + c] += a_r * read.scalar(b, k, c);
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
  if (args.rows < 1 || args.rows > kCpuStreamRows) return false;
  switch (args.rhs_dtype) {
    case DType::kF32:
      return StreamRowsLhs<float>(args);
    case DType::kBF16:
      return StreamRowsLhs<bf16>(args);
    case DType::kF16:
      return StreamRowsLhs<f16>(args);
    case DType::kI8:
      return args.scale && args.scale_block > 0 && StreamRowsLhs<int8_t>(args);
    case DType::kF8E4M3:
      return args.scale && args.scale_block > 0 && StreamRowsLhs<f8e4m3>(args);
    default:
      return false;
  }
}

// --- Row dots: M <= 4 query rows against rows read in place. ---------------------------------
// Each key row is loaded once, a vector at a time, into M accumulators (one per query), reduced
// at the row's end; the scalar tail of K % L columns after. Four rows at a time: a row's M
// accumulator chains alone wait on the FMA latency, and its M horizontal sums on their
// shuffles; four rows' overlap (115 -> 66 cycles per row of 128 bf16 at M = 4 on Ice Lake).
constexpr int64_t kRowDotsAhead = 4;

// Four rows of one head at a time: 4 M accumulators, so the FMA chains overlap and each query
// vector loaded serves four rows; each dot's horizontal sum at the end.
template <int M, typename RT>
HWY_INLINE void RowDots4(const DF d, const RT* const* row, const float* q, int64_t K, float* out,
                         int64_t ldo, int64_t j) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<DF> acc[M][4];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < 4; ++r) acc[m][r] = hn::Zero(d);
  int64_t x = 0;
  for (; x + L <= K; x += L) {
    const auto v0 = LoadWiden(d, row[0] + x), v1 = LoadWiden(d, row[1] + x);
    const auto v2 = LoadWiden(d, row[2] + x), v3 = LoadWiden(d, row[3] + x);
    for (int m = 0; m < M; ++m) {
      const auto qm = hn::LoadU(d, q + m * K + x);
      acc[m][0] = hn::MulAdd(qm, v0, acc[m][0]);
      acc[m][1] = hn::MulAdd(qm, v1, acc[m][1]);
      acc[m][2] = hn::MulAdd(qm, v2, acc[m][2]);
      acc[m][3] = hn::MulAdd(qm, v3, acc[m][3]);
    }
  }
  for (int m = 0; m < M; ++m) {
    for (int r = 0; r < 4; ++r) {
      float sum = hn::GetLane(hn::SumOfLanes(d, acc[m][r]));
      for (int64_t t = x; t < K; ++t)
        sum += q[m * K + t] * static_cast<float>(to_double(row[r][t]));
      out[m * ldo + j + r] = sum;
    }
  }
}

template <int M, typename RT>
HWY_INLINE void RowDots1(const DF d, const RT* row, const float* q, int64_t K, float* out,
                         int64_t ldo, int64_t j) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<DF> acc[M];
  for (int m = 0; m < M; ++m) acc[m] = hn::Zero(d);
  int64_t x = 0;
  for (; x + L <= K; x += L) {
    const auto v = LoadWiden(d, row + x);
    for (int m = 0; m < M; ++m) acc[m] = hn::MulAdd(hn::LoadU(d, q + m * K + x), v, acc[m]);
  }
  for (int m = 0; m < M; ++m) {
    float sum = hn::GetLane(hn::SumOfLanes(d, acc[m]));
    for (int64_t t = x; t < K; ++t) sum += q[m * K + t] * static_cast<float>(to_double(row[t]));
    out[m * ldo + j] = sum;
  }
}

template <int M, typename RT>
void RowDotsT(const RowDotArgs& args) {
  const DF d;
  const int64_t K = args.K;
  const RT* rows = static_cast<const RT*>(args.rows);
  // Rows a page apart (a paged cache's) defeat the hardware prefetchers: every line of the row
  // a few ahead is requested now.
  auto prefetch = [&](int64_t j) {
    if (j >= args.n) return;
    const char* ahead = reinterpret_cast<const char*>(rows + j * args.ld);
    for (int64_t b = 0; b < K * static_cast<int64_t>(sizeof(RT)); b += 64) {
      hwy::Prefetch(ahead + b);
    }
  };
  int64_t j = 0;
  for (; j + 4 <= args.n; j += 4) {
    for (int r = 0; r < 4; ++r) prefetch(j + kRowDotsAhead + r);
    const RT* row[4] = {rows + j * args.ld, rows + (j + 1) * args.ld, rows + (j + 2) * args.ld,
                        rows + (j + 3) * args.ld};
    RowDots4<M, RT>(d, row, args.q, K, args.out, args.ldo, j);
  }
  for (; j < args.n; ++j) {
    prefetch(j + kRowDotsAhead);
    RowDots1<M, RT>(d, rows + j * args.ld, args.q, K, args.out, args.ldo, j);
  }
}

template <typename RT>
bool RowDotsRows(const RowDotArgs& args) {
  switch (args.M) {
    case 1:
      return RowDotsT<1, RT>(args), true;
    case 2:
      return RowDotsT<2, RT>(args), true;
    case 3:
      return RowDotsT<3, RT>(args), true;
    case 4:
      return RowDotsT<4, RT>(args), true;
    default:
      return false;
  }
}

bool RowDotsF32(const RowDotArgs& args) {
  switch (args.dtype) {
    case DType::kF32:
      return RowDotsRows<float>(args);
    case DType::kBF16:
      return RowDotsRows<bf16>(args);
    case DType::kF16:
      return RowDotsRows<f16>(args);
    default:
      return false;
  }
}

}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {

HWY_EXPORT(StreamRowsF32);

bool stream_rows_f32(const StreamArgs& args) { return HWY_DYNAMIC_DISPATCH(StreamRowsF32)(args); }

HWY_EXPORT(RowDotsF32);

bool row_dots_f32(const RowDotArgs& args) { return HWY_DYNAMIC_DISPATCH(RowDotsF32)(args); }

}  // namespace tokamax
#endif  // HWY_ONCE
