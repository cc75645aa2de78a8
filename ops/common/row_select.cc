// Selecting the k largest scores of each row on CPU: threshold select (small k,
// row_select_threshold-inl.h) or radix select (large k, row_select_radix-inl.h), rows in
// parallel tasks.
//
// Dimensions.
//   b, n, k   as in row_select.h
//   len       a row's eligible prefix
//   N         32-bit lanes of the SIMD target
#include "ops/common/row_select.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "ops/framework/errors.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/common/row_select.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "ops/common/row_select_radix-inl.h"
#include "ops/common/row_select_threshold-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
// Internal linkage: other Highway files define functions in the same per-target namespaces.
namespace {

namespace hn = hwy::HWY_NAMESPACE;

// Rows [begin, end) of a problem whose scores are `dtype` (f32, or bf16 / f16 widened to f32 a
// row at a time, in scratch).
void SelectRows(const void* scores, DType dtype, const int32_t* row_lengths, RowSelectRule rule,
                float floor, int64_t n, int64_t k, int32_t* columns, float* values, int64_t begin,
                int64_t end, bool radix_select) {
  const Rows a{n, k, rule, floor, columns, values};
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  // Per-thread scratch that only grows: pool threads are persistent.
  thread_local ThresholdScratch threshold;
  thread_local RadixScratch radix;
  thread_local std::vector<float> widened;
  if (radix_select) {
    radix.reserve(n, N);
  } else {
    threshold.reserve(n, k, N);
  }
  if (dtype != DType::kF32 && widened.size() < static_cast<size_t>(n)) {
    widened.resize(static_cast<size_t>(n));
  }
  for (int64_t r = begin; r < end; ++r) {
    const int64_t len = row_select_length(row_lengths, r, n);
    const float* row = static_cast<const float*>(scores) + r * n;
    if (dtype == DType::kBF16) {
      WidenRow<hwy::bfloat16_t>(df, static_cast<const bf16*>(scores) + r * n, len, widened.data());
      row = widened.data();
    } else if (dtype == DType::kF16) {
      WidenRow<hwy::float16_t>(df, static_cast<const f16*>(scores) + r * n, len, widened.data());
      row = widened.data();
    }
    if (radix_select) {
      RadixSelectRow(a, r, row, len, radix);
    } else {
      ThresholdSelectRow(a, r, row, len, threshold);
    }
  }
}

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {
namespace {

HWY_EXPORT(SelectRows);

}  // namespace

void row_select_cpu(const RowSelectProblem& p, const RowSelectConfig& config, const void* scores,
                    int32_t* columns, float* values) {
  if (!is_kernel_float(p.dtype)) {
    throw NotImplemented("cpu row selection: scores of dtype " + std::string(dtype_name(p.dtype)) +
                         " (f32, bf16 and f16 only)");
  }
  const int64_t per_task = std::max<int64_t>(config.rows_per_task, 1);
  const int64_t tasks = (p.b + per_task - 1) / per_task;
  cpu::parallel_for(tasks, config.num_threads, [&](int64_t task, int) {
    const int64_t begin = task * per_task, end = std::min(p.b, begin + per_task);
    HWY_DYNAMIC_DISPATCH(SelectRows)
    (scores, p.dtype, p.row_lengths, p.rule, p.floor, p.n, p.k, columns, values, begin, end,
     config.radix_select);
  });
}

}  // namespace tokamax
#endif  // HWY_ONCE
