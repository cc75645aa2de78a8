// layer_norm_vjp on CPU: the launch (task split over the thread pool, per-thread partial sums of
// dscale / doffset, scratch); the task bodies are in cpu_kernel_last.cc (last axis) and
// cpu_kernel_inner.cc (other axes).
//
// Dimensions.
//   C      the normalized extent (x's extent along axis)
//   O      product of x's extents before the axis
//   I      product of x's extents after the axis (contiguous); I = 1 for the last axis
//   tI     inner_block: inner elements of one block when I > 1; w_pad = tI rounded up to L
//   C_pad  C rounded up to L
//   L      f32 lanes of the Highway target (16 on AVX-512, 8 on AVX2, 1 scalar)
//
// dscale and doffset are sums over all O * I rows. Each thread adds its rows into partial sums of
// its own ([C_pad] each, no sharing, no atomics), which the caller adds up in thread order once
// the loop is done: C additions per thread, negligible next to the rows.
#include "ops/layer_norm/vjp/cpu_kernel.h"

#include <algorithm>
#include <string>

#include "backends/cpu/scratch.h"
#include "backends/cpu/simd_target.h"
#include "backends/cpu/thread_pool.h"
#include "ops/framework/errors.h"
#include "ops/layer_norm/cpu_kernel.h"
#include "ops/layer_norm/vjp/cpu_tasks.h"

namespace tokamax {
namespace {

// Per-thread f32 scratch that only grows (pool threads are persistent: no allocation, no page
// faults after the first call).
float* thread_scratch(size_t floats) {
  thread_local cpu::ScratchBuffer buffer;
  return buffer.floats(floats);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void layer_norm_vjp_cpu_kernel(const LayerNormVjpProblem& p, const CpuLayerNormVjpLaunch& launch,
                               const void* x, const float* scale, const void* dout, void* dx,
                               float* dscale, float* doffset) {
  if (!is_kernel_float(p.x_dtype)) {
    throw NotImplemented("cpu layer_norm_vjp: x dtype " + std::string(dtype_name(p.x_dtype)) +
                         " (the kernel handles f32, bf16 and f16 with f32 arithmetic)");
  }
  const int64_t C = p.C, I = p.I, L = cpu::simd_f32_lanes();
  const int64_t C_pad = ceil_div(C, L) * L;
  std::fill(dscale, dscale + C, 0.0f);
  std::fill(doffset, doffset + C, 0.0f);
  if (p.num_elements() == 0) return;
  LayerNormVjpTaskArgs args;
  args.dtype = p.x_dtype;
  args.x = x;
  args.dout = dout;
  args.scale = scale;
  args.dx = dx;
  args.C = C;
  args.I = I;
  args.eps = static_cast<float>(p.epsilon);
  args.subtract_mean = p.subtract_mean;
  args.native_bf16 = launch.native_bf16 && layer_norm_cpu_has_native_bf16();
  const int64_t per_task = std::max<int64_t>(launch.units_per_task, 1);
  const int64_t tI = std::clamp<int64_t>(launch.inner_block, 1, I);
  const int64_t blocks = ceil_div(I, tI);
  const int64_t units = p.last_axis() ? p.O : p.O * blocks;
  const int64_t tasks = ceil_div(units, per_task);
  // Whole vectors start at multiples of L elements from a 64-byte aligned base: non-temporal
  // stores (aligned only) need C (last axis), or I and tI, multiples of L.
  args.stream = launch.stream_stores && (p.last_axis() ? C % L == 0 : I % L == 0 && tI % L == 0);

  // Per thread: dscale then doffset partial sums ([2][C_pad]), which the tasks update once per
  // group of rows (so each thread's block is whole cache lines of its own).
  const int threads = cpu::thread_pool().threads_for(tasks, launch.num_threads);
  cpu::PerThreadSums partial(threads, static_cast<size_t>(2 * C_pad));
  if (p.last_axis()) {
    cpu::parallel_for(tasks, launch.num_threads, [&](int64_t task, int thread) {
      float* acc = partial.of(thread);
      const int64_t begin = task * per_task, end = std::min(units, begin + per_task);
      layer_norm_vjp_last_axis_task(args, begin, end, thread_scratch(static_cast<size_t>(3 * C)),
                                    acc, acc + C_pad);
    });
  } else {
    const int64_t w_pad = ceil_div(tI, L) * L;
    cpu::parallel_for(tasks, launch.num_threads, [&](int64_t task, int thread) {
      float* acc = partial.of(thread);
      float* stats = thread_scratch(static_cast<size_t>(4 * w_pad));
      const int64_t end = std::min(units, (task + 1) * per_task);
      for (int64_t unit = task * per_task; unit < end; ++unit) {
        const int64_t o = unit / blocks, i0 = (unit % blocks) * tI;
        const int64_t w = std::min(tI, I - i0);
        // The task's next block, prefetched during this one's output pass.
        const int64_t next_o = (unit + 1) / blocks, next_i0 = ((unit + 1) % blocks) * tI;
        const int64_t next_w = unit + 1 < end ? std::min(tI, I - next_i0) : 0;
        layer_norm_vjp_inner_axis_task(args, o * C * I + i0, w, next_o * C * I + next_i0, next_w,
                                       stats, acc, acc + C_pad);
      }
    });
  }
  for (int t = 0; t < threads; ++t) {
    const float* acc = partial.of(t);
    for (int64_t c = 0; c < C; ++c) {
      dscale[c] += acc[c];
      doffset[c] += acc[C_pad + c];
    }
  }
}

}  // namespace tokamax
