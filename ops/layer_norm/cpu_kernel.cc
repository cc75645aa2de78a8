// layer_norm on CPU: the launch (task split over the thread pool, scratch, target queries); the
// task bodies are in cpu_kernel_last.cc (last axis) and cpu_kernel_inner.cc (other axes).
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//   w      inner elements of the current block (<= tI); w_pad = w rounded up to L
//   L      f32 lanes of the Highway target (16 on AVX-512, 8 on AVX2, 1 scalar)
//
// The op is memory-bound (8 flops per 4 bytes of bf16 traffic), so the design goal is to touch
// DRAM exactly twice per element: read x once, write out once. A unit reads its x from memory
// once while summing (last axis: widened into an f32 row scratch in L1; other axes: the block of
// x stays in L2), then computes the centred sum of squares and the output from cache. Two
// statistics passes (mean, then sum (x - mean)^2) instead of one pass of sum x and sum x^2: the
// one-pass variance cancels catastrophically when |mean| >> sigma, and the second pass is free
// from cache. Software prefetch keeps reads in flight while a unit computes; non-temporal stores
// (optional) skip the read-for-ownership of out.
//
// Last axis (I = 1): a row is contiguous; L lanes of the row per vector, partial vectors at the
// end of rows whose C is not a multiple of L go through a zero-padded copy (masked out of the
// centred sum). Other axes: the C elements of a row are I apart, so vectorizing along the row
// would gather. Instead a block of w contiguous inner elements is w independent rows; vectors
// run across them and the reduction over C is a loop of vector adds into w accumulators (no
// transposition through memory). Columns of a block past the last multiple of L are scalar.
// Row groups of kRowGroup rows (last axis) interleave independent dependency chains.
#include "ops/layer_norm/cpu_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <string>

#include "backends/cpu/cpu_info.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/framework/errors.h"
#include "ops/layer_norm/cpu_tasks.h"

#include <hwy/cache_control.h>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/layer_norm/cpu_kernel.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

#include "ops/layer_norm/cpu_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tokamax::HWY_NAMESPACE {
// Internal linkage: other ops' Highway files define functions of the same names in the same
// per-target namespaces (tokamax::N_AVX3, ...), which the linker would otherwise merge.
namespace {

bool NativeBf16Path() { return kHasNativeBf16Path; }

}  // namespace
}  // namespace tokamax::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tokamax {
namespace {

HWY_EXPORT(NativeBf16Path);

// Per-thread f32 scratch that only grows: pool threads are persistent, so after the first call
// a launch allocates nothing (a fresh allocation would page-fault on first touch every call).
float* thread_scratch(size_t floats) {
  thread_local cpu::ScratchBuffer buffer;
  return buffer.floats(floats);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool layer_norm_cpu_has_native_bf16() {
  static const bool has =
      HWY_DYNAMIC_DISPATCH(NativeBf16Path)() && cpu::host_cpu().has("avx512_bf16");
  return has;
}

void layer_norm_cpu_kernel(const LayerNormProblem& p, const CpuLayerNormLaunch& launch,
                           const void* x, const float* scale, const float* offset, void* out) {
  if (!is_kernel_float(p.x_dtype)) {
    throw NotImplemented("cpu layer_norm: x dtype " + std::string(dtype_name(p.x_dtype)) +
                         " (the kernel handles f32, bf16 and f16 with f32 statistics)");
  }
  if (p.num_elements() == 0) return;
  const int64_t C = p.C, I = p.I, L = cpu::simd_f32_lanes();
  const float eps = static_cast<float>(p.epsilon);
  const int64_t per_task = std::max<int64_t>(launch.units_per_task, 1);
  const bool native_bf16 = launch.native_bf16 && layer_norm_cpu_has_native_bf16();
  if (p.last_axis()) {
    // Whole vectors of every row start at multiples of L elements from a 64-byte aligned base,
    // so non-temporal stores (aligned only) need C to be a multiple of L.
    const bool stream = launch.stream_stores && C % L == 0;
    const int64_t rows = p.O;
    const size_t row_floats = static_cast<size_t>(layer_norm_row_scratch_floats(C));
    cpu::parallel_for(ceil_div(rows, per_task), launch.num_threads, [&](int64_t task, int) {
      const int64_t begin = task * per_task, end = std::min(rows, begin + per_task);
      layer_norm_last_axis_task(p.x_dtype, x, out, begin, end, C, scale, offset, eps,
                                p.subtract_mean, stream, native_bf16, thread_scratch(row_floats));
      if (stream) hwy::FlushStream();  // drains the non-temporal stores (sfence)
    });
    return;
  }
  const int64_t tI = std::clamp<int64_t>(launch.inner_block, 1, I);
  const int64_t blocks = ceil_div(I, tI);
  const int64_t units = p.O * blocks;
  const int64_t w_pad = ceil_div(tI, L) * L;
  // Vectors start at c * I + i0 + j with i0 a multiple of tI and j of L.
  const bool stream = launch.stream_stores && I % L == 0 && tI % L == 0;
  cpu::parallel_for(ceil_div(units, per_task), launch.num_threads, [&](int64_t task, int) {
    float* stats = thread_scratch(static_cast<size_t>(3 * w_pad));
    const int64_t end = std::min(units, (task + 1) * per_task);
    for (int64_t unit = task * per_task; unit < end; ++unit) {
      const int64_t o = unit / blocks, i0 = (unit % blocks) * tI;
      const int64_t w = std::min(tI, I - i0);
      // The task's next block, prefetched during this one's passes from cache.
      const int64_t next_o = (unit + 1) / blocks, next_i0 = ((unit + 1) % blocks) * tI;
      const int64_t next_w = unit + 1 < end ? std::min(tI, I - next_i0) : 0;
      layer_norm_inner_axis_task(p.x_dtype, x, out, o * C * I + i0, C, I, w,
                                 next_o * C * I + next_i0, next_w, scale, offset, eps,
                                 p.subtract_mean, stream, native_bf16, stats);
    }
    if (stream) hwy::FlushStream();  // drains the non-temporal stores (sfence)
  });
}

}  // namespace tokamax
#endif  // HWY_ONCE
