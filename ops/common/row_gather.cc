// Row gathers on CPU: rows copied (or summed, weighted) from scattered source rows, the source
// rows of the rows ahead prefetched while the current ones are read, the output optionally
// streamed past the cache.
//
// Dimensions.
//   in, h, T, g   as in row_gather.h
//   L             f32 lanes of the SIMD target; N bytes of one vector
#include "ops/common/row_gather.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "ops/framework/errors.h"

#include <hwy/cache_control.h>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/row_gather.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "ops/common/cpu_convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
// Internal linkage: other Highway files define functions in the same per-target namespaces.
namespace {

namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kLine = 64;

// The lines of [p + offset, p + offset + bytes) into L2; nothing for a null p.
HWY_INLINE void PrefetchChunk(const uint8_t* p, int64_t offset, int64_t bytes) {
  if (p == nullptr) return;
  for (int64_t o = 0; o < bytes; o += kLine)
    PrefetchL2(reinterpret_cast<const char*>(p + offset + o));
}

// One row of `bytes` copied from src to dst, 4 vectors at a time, the same stretch of `ahead`
// (the source row of a later output row, or null) prefetched as it goes. kStream: dst and bytes
// are multiples of the vector size (the launch checks).
template <bool kStream>
HWY_INLINE void CopyRow(const uint8_t* HWY_RESTRICT src, uint8_t* HWY_RESTRICT dst, int64_t bytes,
                        const uint8_t* ahead) {
  const hn::ScalableTag<uint8_t> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + 4 * N <= bytes; i += 4 * N) {
    PrefetchChunk(ahead, i, 4 * N);
    const auto v0 = hn::LoadU(d, src + i), v1 = hn::LoadU(d, src + i + N);
    const auto v2 = hn::LoadU(d, src + i + 2 * N), v3 = hn::LoadU(d, src + i + 3 * N);
    StoreVec<kStream>(d, v0, dst + i);
    StoreVec<kStream>(d, v1, dst + i + N);
    StoreVec<kStream>(d, v2, dst + i + 2 * N);
    StoreVec<kStream>(d, v3, dst + i + 3 * N);
  }
  PrefetchChunk(ahead, i, bytes - i);
  for (; i + N <= bytes; i += N) StoreVec<kStream>(d, hn::LoadU(d, src + i), dst + i);
  if (i < bytes) std::memcpy(dst + i, src + i, static_cast<size_t>(bytes - i));
}

template <bool kStream>
void GatherRowsImpl(const uint8_t* x, const int32_t* indices, int64_t row_bytes, int64_t begin,
                    int64_t end, int prefetch_rows, uint8_t* out) {
  for (int64_t i = begin; i < end; ++i) {
    const int64_t next = i + prefetch_rows;
    const uint8_t* ahead =
        prefetch_rows > 0 && next < end ? x + indices[next] * row_bytes : nullptr;
    CopyRow<kStream>(x + indices[i] * row_bytes, out + i * row_bytes, row_bytes, ahead);
  }
}

void GatherRows(const uint8_t* x, const int32_t* indices, int64_t row_bytes, int64_t begin,
                int64_t end, bool stream, int prefetch_rows, uint8_t* out) {
  if (stream) {
    GatherRowsImpl<true>(x, indices, row_bytes, begin, end, prefetch_rows, out);
  } else {
    GatherRowsImpl<false>(x, indices, row_bytes, begin, end, prefetch_rows, out);
  }
}

float WeightAt(const void* weights, DType dtype, int64_t r) {
  switch (dtype) {
    case DType::kBF16:
      return to_float(static_cast<const bf16*>(weights)[r]);
    case DType::kF16:
      return to_float(static_cast<const f16*>(weights)[r]);
    default:
      return static_cast<const float*>(weights)[r];
  }
}

// The valid routes of token t: their source rows and weights, in route order. Returns the count.
template <typename T>
HWY_INLINE int CollectRoutes(const GatherReduceProblem& p, const T* x, const int32_t* indices,
                             const void* weights, const bool* valid, int64_t t, const T** rows,
                             float* w) {
  int n = 0;
  for (int64_t r = t * p.g; r < (t + 1) * p.g; ++r) {
    if (!valid[r]) continue;
    rows[n] = x + indices[r] * p.h;
    w[n] = WeightAt(weights, p.weights_dtype, r);
    ++n;
  }
  return n;
}

// The same columns [c, c + count) of the `n` rows of `ahead` into L2.
template <typename T>
HWY_INLINE void PrefetchColumns(const T* const* ahead, int n, int64_t c, int64_t count) {
  for (int j = 0; j < n; ++j) {
    PrefetchChunk(reinterpret_cast<const uint8_t*>(ahead[j]), c * static_cast<int64_t>(sizeof(T)),
                  count * static_cast<int64_t>(sizeof(T)));
  }
}

// dst = sum over j < n of w[j] * rows[j], 4L columns at a time in registers (in pair order for
// bf16, which halves the widening), while the same columns of the `n_ahead` rows of a later
// token are prefetched. kStream: dst is aligned to 64 bytes and h * sizeof(T) a multiple of 64.
template <typename T, bool kStream>
HWY_INLINE void ReduceToken(const T* const* rows, const float* w, int n, int64_t h,
                            const T* const* ahead, int n_ahead, T* HWY_RESTRICT dst) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t c = 0;
  if constexpr (std::is_same_v<T, bf16> && kHasPairPath) {
    for (; c + 4 * L <= h; c += 4 * L) {
      PrefetchColumns(ahead, n_ahead, c, 4 * L);
      VF e0 = hn::Zero(d), o0 = e0, e1 = e0, o1 = e0;
      for (int j = 0; j < n; ++j) {
        const VF wj = hn::Set(d, w[j]);
        VF x0, y0, x1, y1;
        LoadWidenPair(rows[j] + c, x0, y0);
        LoadWidenPair(rows[j] + c + 2 * L, x1, y1);
        e0 = hn::MulAdd(wj, x0, e0);
        o0 = hn::MulAdd(wj, y0, o0);
        e1 = hn::MulAdd(wj, x1, e1);
        o1 = hn::MulAdd(wj, y1, o1);
      }
      StorePairBf16<kStream>(e0, o0, dst + c, /*native=*/false);
      StorePairBf16<kStream>(e1, o1, dst + c + 2 * L, /*native=*/false);
    }
  }
  for (; c + 4 * L <= h; c += 4 * L) {
    PrefetchColumns(ahead, n_ahead, c, 4 * L);
    VF a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
    for (int j = 0; j < n; ++j) {
      const VF wj = hn::Set(d, w[j]);
      a0 = hn::MulAdd(wj, LoadWiden(d, rows[j] + c), a0);
      a1 = hn::MulAdd(wj, LoadWiden(d, rows[j] + c + L), a1);
      a2 = hn::MulAdd(wj, LoadWiden(d, rows[j] + c + 2 * L), a2);
      a3 = hn::MulAdd(wj, LoadWiden(d, rows[j] + c + 3 * L), a3);
    }
    StoreNarrow<T, kStream>(d, a0, dst + c, /*native_bf16=*/false);
    StoreNarrow<T, kStream>(d, a1, dst + c + L, false);
    StoreNarrow<T, kStream>(d, a2, dst + c + 2 * L, false);
    StoreNarrow<T, kStream>(d, a3, dst + c + 3 * L, false);
  }
  PrefetchColumns(ahead, n_ahead, c, h - c);
  for (; c + L <= h; c += L) {
    VF a = hn::Zero(d);
    for (int j = 0; j < n; ++j) a = hn::MulAdd(hn::Set(d, w[j]), LoadWiden(d, rows[j] + c), a);
    StoreNarrow<T, kStream>(d, a, dst + c, false);
  }
  if (c < h) {
    const size_t count = static_cast<size_t>(h - c);
    VF a = hn::Zero(d);
    for (int j = 0; j < n; ++j) {
      a = hn::MulAdd(hn::Set(d, w[j]), LoadWidenPartial(d, rows[j] + c, count), a);
    }
    StoreNarrowPartial(d, a, dst + c, count);
  }
}

template <typename T>
void GatherReduceTyped(const GatherReduceProblem& p, const T* x, const int32_t* indices,
                       const void* weights, const bool* valid, int64_t begin, int64_t end,
                       bool stream, int prefetch_rows, T* out) {
  // The current token's routes, then the routes of the token prefetch_rows ahead. Per thread,
  // only growing: pool threads are persistent.
  thread_local std::vector<const T*> rows;
  thread_local std::vector<float> w;
  const size_t g = static_cast<size_t>(p.g);
  if (rows.size() < 2 * g) rows.resize(2 * g), w.resize(2 * g);
  for (int64_t t = begin; t < end; ++t) {
    const int n = CollectRoutes(p, x, indices, weights, valid, t, rows.data(), w.data());
    const int64_t next = t + prefetch_rows;
    const int n_ahead =
        prefetch_rows > 0 && next < end
            ? CollectRoutes(p, x, indices, weights, valid, next, rows.data() + g, w.data() + g)
            : 0;
    T* dst = out + t * p.h;
    if (stream) {
      ReduceToken<T, true>(rows.data(), w.data(), n, p.h, rows.data() + g, n_ahead, dst);
    } else {
      ReduceToken<T, false>(rows.data(), w.data(), n, p.h, rows.data() + g, n_ahead, dst);
    }
  }
}

void GatherReduce(const GatherReduceProblem& p, const void* x, const int32_t* indices,
                  const void* weights, const bool* valid, int64_t begin, int64_t end, bool stream,
                  int prefetch_rows, void* out) {
  switch (p.x_dtype) {
    case DType::kBF16:
      return GatherReduceTyped(p, static_cast<const bf16*>(x), indices, weights, valid, begin, end,
                               stream, prefetch_rows, static_cast<bf16*>(out));
    case DType::kF16:
      return GatherReduceTyped(p, static_cast<const f16*>(x), indices, weights, valid, begin, end,
                               stream, prefetch_rows, static_cast<f16*>(out));
    default:
      return GatherReduceTyped(p, static_cast<const float*>(x), indices, weights, valid, begin, end,
                               stream, prefetch_rows, static_cast<float*>(out));
  }
}

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {
namespace {

HWY_EXPORT(GatherRows);
HWY_EXPORT(GatherReduce);

// Streams where asked and where every vector store is aligned: out at 64 bytes, rows a whole
// number of lines.
bool can_stream(const RowGatherConfig& config, const void* out, int64_t row_bytes) {
  return config.stream_stores && row_bytes % 64 == 0 && reinterpret_cast<uintptr_t>(out) % 64 == 0;
}

}  // namespace

void gather_rows_cpu(const GatherRowsProblem& p, const RowGatherConfig& config, const void* x,
                     const int32_t* indices, void* out) {
  const int64_t rows = p.last - p.first;
  if (rows <= 0 || p.row_bytes <= 0) return;
  const bool stream = can_stream(config, out, p.row_bytes);
  const int64_t per_task = std::max<int64_t>(config.rows_per_task, 1);
  const int64_t tasks = (rows + per_task - 1) / per_task;
  cpu::parallel_for(tasks, config.num_threads, [&](int64_t task, int) {
    const int64_t begin = p.first + task * per_task, end = std::min(p.last, begin + per_task);
    HWY_DYNAMIC_DISPATCH(GatherRows)
    (static_cast<const uint8_t*>(x), indices, p.row_bytes, begin, end, stream, config.prefetch_rows,
     static_cast<uint8_t*>(out));
    // Drains the non-temporal stores (sfence): the caller sees them once parallel_for returns.
    if (stream) hwy::FlushStream();
  });
}

void gather_reduce_rows_cpu(const GatherReduceProblem& p, const RowGatherConfig& config,
                            const void* x, const int32_t* indices, const void* weights,
                            const bool* valid, void* out) {
  if (!is_kernel_float(p.x_dtype) || !is_kernel_float(p.weights_dtype)) {
    throw NotImplemented("cpu gather-reduce: x " + std::string(dtype_name(p.x_dtype)) +
                         ", weights " + std::string(dtype_name(p.weights_dtype)) +
                         " (f32, bf16 and f16 only)");
  }
  if (p.T <= 0 || p.h <= 0) return;
  const bool stream = can_stream(config, out, p.h * static_cast<int64_t>(dtype_size(p.x_dtype)));
  const int64_t per_task = std::max<int64_t>(config.rows_per_task, 1);
  const int64_t tasks = (p.T + per_task - 1) / per_task;
  cpu::parallel_for(tasks, config.num_threads, [&](int64_t task, int) {
    const int64_t begin = task * per_task, end = std::min(p.T, begin + per_task);
    HWY_DYNAMIC_DISPATCH(GatherReduce)
    (p, x, indices, weights, valid, begin, end, stream, config.prefetch_rows, out);
    if (stream) hwy::FlushStream();
  });
}

}  // namespace tokamax
#endif  // HWY_ONCE
