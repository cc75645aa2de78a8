// Measurement kernels for the roofline ceilings: FMA chains, bf16 and int8 dot chains, AMX tile
// product chains, STREAM triad.
// Dimensions.
//   C      independent accumulator chains per core (vector registers)
//   L      lanes of the widest vector Highway dispatches to
//   n      elements of each triad array
#include "backends/cpu/peaks.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "backends/cpu/amx.h"
#include "backends/cpu/amx_tiles.h"
#include "backends/cpu/cpu_info.h"
#include "backends/cpu/host_memory.h"
#include "backends/cpu/thread_pool.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/peaks.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target; highway.h must follow it.
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tokamax::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Independent FMA chains: a chain issues one FMA per FMA latency (4-5 cycles on current x86 and
// Arm cores), so saturating P FMA pipes needs at least latency x P chains (2 pipes: 8-10). With
// 32 vector registers (AVX-512, NEON, SVE) 16 chains leave headroom for longer latencies; with 16
// registers (AVX2, SSE4) 12 chains plus the two constants still fit without spilling, and a spill
// would put loads and stores into the loop we are timing.
#if HWY_ARCH_X86
constexpr int kChains = HWY_TARGET > HWY_AVX3 ? 12 : 16;
#else
constexpr int kChains = 16;
#endif

#define TOKAMAX_FMA_STEP(k) a##k = hn::MulAdd(a##k, mul, add)

// Runs `iterations` rounds of C dependent FMAs on L-lane vectors; returns the flops done and
// stores the reduced accumulators to *sink so the loop cannot be dropped. `scale` comes from the
// caller at run time so the compiler cannot evaluate the chains ahead of time either.
template <typename T>
int64_t FmaChains(int64_t iterations, T scale, double* sink) {
  const hn::ScalableTag<T> d;
  // mul < 1 keeps each chain converging to add / (1 - mul): no overflow, no subnormals (which
  // would take a slow microcode path on some cores).
  const auto mul = hn::Set(d, scale);
  const auto add = hn::Set(d, T(1) - scale);
  // Distinct starting values: identical chains could be merged into one by the compiler.
  auto a0 = hn::Set(d, T(0)), a1 = hn::Set(d, T(1)), a2 = hn::Set(d, T(2)), a3 = hn::Set(d, T(3));
  auto a4 = hn::Set(d, T(4)), a5 = hn::Set(d, T(5)), a6 = hn::Set(d, T(6)), a7 = hn::Set(d, T(7));
  auto a8 = hn::Set(d, T(8)), a9 = hn::Set(d, T(9)), a10 = hn::Set(d, T(10));
  auto a11 = hn::Set(d, T(11)), a12 = hn::Set(d, T(12)), a13 = hn::Set(d, T(13));
  auto a14 = hn::Set(d, T(14)), a15 = hn::Set(d, T(15));
  for (int64_t i = 0; i < iterations; ++i) {
    TOKAMAX_FMA_STEP(0), TOKAMAX_FMA_STEP(1), TOKAMAX_FMA_STEP(2), TOKAMAX_FMA_STEP(3);
    TOKAMAX_FMA_STEP(4), TOKAMAX_FMA_STEP(5), TOKAMAX_FMA_STEP(6), TOKAMAX_FMA_STEP(7);
    TOKAMAX_FMA_STEP(8), TOKAMAX_FMA_STEP(9), TOKAMAX_FMA_STEP(10), TOKAMAX_FMA_STEP(11);
    if constexpr (kChains == 16) {
      TOKAMAX_FMA_STEP(12), TOKAMAX_FMA_STEP(13), TOKAMAX_FMA_STEP(14), TOKAMAX_FMA_STEP(15);
    }
  }
  auto sum = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), a6));
  sum = hn::Add(hn::Add(sum, hn::Add(a7, a8)), hn::Add(hn::Add(a9, a10), a11));
  if constexpr (kChains == 16) sum = hn::Add(sum, hn::Add(hn::Add(a12, a13), hn::Add(a14, a15)));
  *sink = hn::GetLane(hn::SumOfLanes(d, sum));
  return iterations * kChains * static_cast<int64_t>(hn::Lanes(d)) * 2;
}

#undef TOKAMAX_FMA_STEP

int64_t FmaChainsF32(int64_t iterations, float scale, double* sink) {
  return FmaChains<float>(iterations, scale, sink);
}
int64_t FmaChainsF64(int64_t iterations, double scale, double* sink) {
  return FmaChains<double>(iterations, scale, sink);
}

// STREAM triad a = b + s*c on one chunk. Plain loads and stores, as STREAM compiles them:
// non-temporal stores would skip the write-allocate read and report more than kernels that
// store normally can reach.
void StreamTriad(double* HWY_RESTRICT a,        // [n] chunk of the output
                 const double* HWY_RESTRICT b,  // [n] chunk
                 const double* HWY_RESTRICT c,  // [n] chunk
                 double s, int64_t n) {
  const hn::ScalableTag<double> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto vs = hn::Set(d, s);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    hn::StoreU(hn::MulAdd(vs, hn::LoadU(d, c + i), hn::LoadU(d, b + i)), d, a + i);
  }
  for (; i < n; ++i) a[i] = b[i] + s * c[i];
}

}  // namespace tokamax::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#if HWY_ARCH_X86
#include <immintrin.h>
#endif

namespace tokamax::cpu {

HWY_EXPORT(FmaChainsF32);
HWY_EXPORT(FmaChainsF64);
HWY_EXPORT(StreamTriad);

namespace {

using Clock = std::chrono::steady_clock;

// Sink for kernel results: a volatile store the optimizer must keep.
volatile double g_sink = 0;

#if HWY_ARCH_X86
// vdpbf16ps chains: each instruction does 32 bf16 products (64 flops) into 16 f32 lanes. Its
// latency is 5-6 cycles at up to 2 per cycle, so 16 chains cover latency x throughput (<= 12);
// inputs come from `value` at run time so nothing folds.
__attribute__((target("avx512f,avx512bf16"))) int64_t Bf16DotChains(int64_t iterations, float value,
                                                                    double* sink) {
  // y alternates sign, so each lane's pair of products cancels (v*v - v*v == 0 exactly) and the
  // chains stay at their start values instead of growing.
  const __m512 v = _mm512_set1_ps(value);
  const __m512 v_alternating = _mm512_mask_blend_ps(0xAAAA, v, _mm512_set1_ps(-value));
  const __m512bh x = _mm512_cvtne2ps_pbh(v, v);
  const __m512bh y = _mm512_cvtne2ps_pbh(v_alternating, v_alternating);
  __m512 acc[16];
  for (int k = 0; k < 16; ++k) acc[k] = _mm512_set1_ps(static_cast<float>(k));
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], x, y);
  }
  __m512 sum = acc[0];
  for (int k = 1; k < 16; ++k) sum = _mm512_add_ps(sum, acc[k]);
  *sink = _mm512_reduce_add_ps(sum);
  return iterations * 16 * 64;
}

// acc + the four-way u8 x s8 dot products of x and y. By value: GCC 12 copies the intrinsic's
// destination on every call, and an asm operand bound to an array element keeps the array in
// memory; either way the chains would time loads and stores, not vpdpbusd.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline __m512i Dpbusd(__m512i acc, __m512i x,
                                                                             __m512i y) {
  asm("vpdpbusd %[y], %[x], %[acc]" : [acc] "+v"(acc) : [x] "v"(x), [y] "v"(y));
  return acc;
}

// vpdpbusd chains: each instruction does 64 u8 x s8 products (128 ops) into 16 int32 lanes.
// x is 1 in every byte and y alternates +1 / -1, so each lane adds 1 - 1 + 1 - 1 = 0 and the
// chains keep their start values.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int64_t Int8DotChains(int64_t iterations,
                                                                             int value,
                                                                             double* sink) {
  const __m512i x = _mm512_set1_epi8(static_cast<char>(value));
  const __m512i y = _mm512_set1_epi16(static_cast<short>((-value << 8) | (value & 0xFF)));
  __m512i acc[16];
  for (int k = 0; k < 16; ++k) acc[k] = _mm512_set1_epi32(k);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) acc[k] = Dpbusd(acc[k], x, y);
  }
  __m512i sum = acc[0];
  for (int k = 1; k < 16; ++k) sum = _mm512_add_epi32(sum, acc[k]);
  *sink = static_cast<double>(_mm512_reduce_add_epi32(sum));
  return iterations * 16 * 128;
}

// AMX tile product chains: four accumulator tiles (tmm0-3) each take a product of the same two
// operand tiles per iteration, so four independent chains hide the product's latency (about 16
// cycles at one product per 16 cycles per core on Sapphire Rapids) and nothing is loaded inside
// the loop. A product is 16 x 16 x 32 bf16 (16384 flops) or 16 x 16 x 64 int8 (32768 ops). As in
// the vector chains the operands cancel (each pair or quad of B alternates sign), so the
// accumulators keep their zero start.
template <bool kInt8>
int64_t AmxChains(int64_t iterations, double* sink) {
  using Tiles = amx::HardwareTiles;
  amx::TileConfig config;
  for (int t = 0; t < amx::kTiles; ++t) config.set(t, amx::kMaxRows, amx::kMaxColsb);
  // bf16: A all 0.5, B's pairs (0.5, -0.5); int8: A all 1, B's quads (1, -1, 1, -1).
  alignas(64) uint16_t a[amx::kMaxRows * 32], b[amx::kMaxRows * 32];
  for (int i = 0; i < amx::kMaxRows * 32; ++i) {
    a[i] = kInt8 ? 0x0101 : 0x3F00;
    b[i] = kInt8 ? 0xFF01 : (i % 2 ? 0xBF00 : 0x3F00);
  }
  Tiles::configure(config);
  Tiles::zero<0>(), Tiles::zero<1>(), Tiles::zero<2>(), Tiles::zero<3>();
  Tiles::load<4>(a, 64);
  Tiles::load<5>(b, 64);
  for (int64_t i = 0; i < iterations; ++i) {
    if constexpr (kInt8) {
      Tiles::dpbusd<0, 4, 5>(), Tiles::dpbusd<1, 4, 5>();
      Tiles::dpbusd<2, 4, 5>(), Tiles::dpbusd<3, 4, 5>();
    } else {
      Tiles::dpbf16ps<0, 4, 5>(), Tiles::dpbf16ps<1, 4, 5>();
      Tiles::dpbf16ps<2, 4, 5>(), Tiles::dpbf16ps<3, 4, 5>();
    }
  }
  alignas(64) float out[amx::kMaxRows * 16];
  Tiles::store<0>(out, 64);
  Tiles::release();
  *sink = out[0];
  return iterations * 4 * (kInt8 ? 32768 : 16384);
}
#endif

int used_threads(const PeakOptions& options) {
  const int wanted = options.threads > 0 ? options.threads : thread_pool().size();
  return thread_pool().threads_for(wanted, wanted);
}

// One run on all cores: wall time of the whole parallel section and each thread's CPU time.
struct CoreTimes {
  double wall_seconds = 0;          // first start to last finish
  std::vector<double> cpu_seconds;  // [threads] time each thread actually ran
};

double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

// Runs body(thread) once on each of `threads` pool threads at the same time.
CoreTimes run_on_cores(int threads, const std::function<void(int)>& body) {
  std::atomic<int> arrived{0};
  std::vector<Clock::time_point> start(threads), end(threads);
  CoreTimes times;
  times.cpu_seconds.resize(threads);
  parallel_for(threads, threads, [&](int64_t task, int) {
    // Spin barrier: tasks are handed out dynamically, so without it a thread that finished early
    // could run a second task after the first and we would time one core twice, not all cores
    // at once. The deadline keeps a call nested in another parallel loop (run serially) going.
    arrived.fetch_add(1);
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(200);
    while (arrived.load() < threads && Clock::now() < deadline) {
    }
    start[task] = Clock::now();
    const double cpu_start = thread_cpu_seconds();
    body(static_cast<int>(task));
    times.cpu_seconds[task] = thread_cpu_seconds() - cpu_start;
    end[task] = Clock::now();
  });
  times.wall_seconds = std::chrono::duration<double>(*std::max_element(end.begin(), end.end()) -
                                                     *std::min_element(start.begin(), start.end()))
                           .count();
  return times;
}

// Best rate, in GFLOP/s, of `kernel(iterations, sink) -> flops` on all cores at once: the sum of
// per-core rates, each over the thread's own CPU time. A shared machine preempts our threads for
// others' work; CPU time leaves those gaps out (wall time would not), and the FMA units are
// private to a core, so the sum is what the cores reach together.
double best_compute_rate(const PeakOptions& options,
                         const std::function<int64_t(int64_t, double*)>& kernel) {
  const int threads = used_threads(options);
  const int repetitions = std::max(1, options.repetitions);
  std::vector<int64_t> flops(threads);
  std::vector<double> sinks(threads);
  auto run = [&](int64_t iterations) {
    return run_on_cores(threads, [&](int t) { flops[t] = kernel(iterations, &sinks[t]); });
  };
  // Calibrate the iteration count to the (wall) time budget; these runs also bring the cores up
  // to their clock (and AVX-512 power level) before anything is timed for real.
  int64_t iterations = 1 << 12;
  double elapsed = run(iterations).wall_seconds;
  while (elapsed < 0.01 && iterations < (int64_t{1} << 40)) {
    iterations *= 4;
    elapsed = run(iterations).wall_seconds;
  }
  const double budget = std::max(options.seconds_per_kernel, 1e-4) / repetitions;
  iterations = std::max<int64_t>(1, static_cast<int64_t>(iterations * budget / elapsed));
  double best = 0;
  for (int r = 0; r < repetitions; ++r) {
    const CoreTimes times = run(iterations);
    double rate = 0;
    for (int t = 0; t < threads; ++t) {
      if (times.cpu_seconds[t] > 0) rate += static_cast<double>(flops[t]) / times.cpu_seconds[t];
    }
    best = std::max(best, rate * 1e-9);
  }
  for (double s : sinks) g_sink = g_sink + s;
  return best;
}

int64_t default_triad_bytes() {
  constexpr int64_t kMiB = int64_t{1} << 20;
  const int64_t physical = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  // Far beyond the last-level cache, so the arrays stream from DRAM on every pass.
  int64_t bytes = std::max<int64_t>(8 * host_cpu().l3_bytes, 256 * kMiB);
  bytes = std::min<int64_t>(bytes, 1024 * kMiB);
  if (physical > 0) bytes = std::min(bytes, physical / 4);
  return bytes;
}

}  // namespace

double measure_f32_fma_gflops(const PeakOptions& options) {
  return best_compute_rate(options, [](int64_t iterations, double* sink) {
    return HWY_DYNAMIC_DISPATCH(FmaChainsF32)(iterations, 0.999f, sink);
  });
}

double measure_f64_fma_gflops(const PeakOptions& options) {
  return best_compute_rate(options, [](int64_t iterations, double* sink) {
    return HWY_DYNAMIC_DISPATCH(FmaChainsF64)(iterations, 0.999, sink);
  });
}

double measure_bf16_dot_gflops(const PeakOptions& options) {
#if HWY_ARCH_X86
  if (!host_cpu().has("avx512_bf16")) return 0;
  return best_compute_rate(options, [](int64_t iterations, double* sink) {
    return Bf16DotChains(iterations, 0.5f, sink);
  });
#else
  (void)options;
  return 0;
#endif
}

double measure_int8_dot_gflops(const PeakOptions& options) {
#if HWY_ARCH_X86
  if (!host_cpu().has("avx512_vnni")) return 0;
  return best_compute_rate(
      options, [](int64_t iterations, double* sink) { return Int8DotChains(iterations, 1, sink); });
#else
  (void)options;
  return 0;
#endif
}

double measure_amx_bf16_gflops(const PeakOptions& options) {
#if HWY_ARCH_X86
  if (!host_amx().bf16) return 0;
  return best_compute_rate(
      options, [](int64_t iterations, double* sink) { return AmxChains<false>(iterations, sink); });
#else
  (void)options;
  return 0;
#endif
}

double measure_amx_int8_gflops(const PeakOptions& options) {
#if HWY_ARCH_X86
  if (!host_amx().int8) return 0;
  return best_compute_rate(
      options, [](int64_t iterations, double* sink) { return AmxChains<true>(iterations, sink); });
#else
  (void)options;
  return 0;
#endif
}

double measure_triad_gbps(const PeakOptions& options) {
  const int threads = used_threads(options);
  const int64_t bytes =
      options.bandwidth_bytes > 0 ? options.bandwidth_bytes : default_triad_bytes();
  // Chunks of whole 64-element blocks (512 bytes), so every thread starts on its own cache lines.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = std::max<int64_t>(threads, bytes / (kBlock * 3 * 8));
  const int64_t n = blocks * kBlock;
  // The tensors' allocator: large arrays on huge pages, like the tensors whose ceiling this is.
  struct Free {
    void operator()(double* p) const { free_host(p); }
  };
  auto array = [n] {
    return std::unique_ptr<double[], Free>(
        static_cast<double*>(allocate_host(static_cast<size_t>(n) * sizeof(double))));
  };
  std::unique_ptr<double[], Free> a, b, c;
  try {
    a = array(), b = array(), c = array();
  } catch (const std::bad_alloc&) {
    return 0;  // no memory for the arrays: no bandwidth figure
  }
  auto chunk = [&](int t) {  // -> (first element, element count) of thread t
    const int64_t begin = blocks * t / threads * kBlock;
    return std::pair<int64_t, int64_t>(begin, blocks * (t + 1) / threads * kBlock - begin);
  };
  // First touch by the thread that will stream the chunk: on a NUMA machine its pages then live
  // on that thread's node. The untimed pass also faults every page in before timing.
  run_on_cores(threads, [&](int t) {
    const auto [begin, count] = chunk(t);
    std::fill_n(a.get() + begin, count, 0.0);
    std::fill_n(b.get() + begin, count, 1.0);
    std::fill_n(c.get() + begin, count, 2.0);
  });
  // STREAM's count: 3 arrays x 8 bytes per element (read b, read c, write a). The cache also
  // reads each line of `a` before writing it (write-allocate); like STREAM we do not count that
  // traffic, so the DRAM really moves 4/3 of what is reported.
  constexpr double kBytesPerElement = 3 * sizeof(double);
  // Timing: each thread's CPU time, as for the compute peaks, so that passes in which another
  // process preempted one of our threads still count. DRAM bandwidth is shared, though: a thread
  // that ran while the others were preempted moved its bytes faster than its fair share. So the
  // slowest thread sets the rate (threads x its bytes / its CPU time); when the threads overlap,
  // as on an idle machine, that equals the wall-time figure STREAM reports.
  double best = 0;
  for (int r = 0; r < 2 * std::max(2, options.repetitions); ++r) {
    std::vector<double> thread_bytes(threads);
    const CoreTimes times = run_on_cores(threads, [&](int t) {
      const auto [begin, count] = chunk(t);
      HWY_DYNAMIC_DISPATCH(StreamTriad)
      (a.get() + begin, b.get() + begin, c.get() + begin, 3.0, count);
      thread_bytes[t] = kBytesPerElement * static_cast<double>(count);
    });
    double slowest = 0;  // bytes/s of the slowest thread
    for (int t = 0; t < threads; ++t) {
      const double rate = times.cpu_seconds[t] > 0 ? thread_bytes[t] / times.cpu_seconds[t] : 0;
      slowest = t == 0 ? rate : std::min(slowest, rate);
    }
    best = std::max(best, threads * slowest * 1e-9);
  }
  g_sink = g_sink + a[n / 2];
  return best;
}

Peaks measure_peaks(const PeakOptions& options) {
  Peaks peaks;
  peaks.f32_fma_gflops = measure_f32_fma_gflops(options);
  peaks.f64_fma_gflops = measure_f64_fma_gflops(options);
  peaks.bf16_dot_gflops = measure_bf16_dot_gflops(options);
  peaks.int8_dot_gflops = measure_int8_dot_gflops(options);
  peaks.amx_bf16_gflops = measure_amx_bf16_gflops(options);
  peaks.amx_int8_gflops = measure_amx_int8_gflops(options);
  peaks.bandwidth_gbps = measure_triad_gbps(options);
  return peaks;
}

int64_t bandwidth_probe_bytes(int64_t llc_bytes) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  return std::clamp<int64_t>(4 * std::max<int64_t>(llc_bytes, 0), 64 * kMiB, 512 * kMiB);
}

}  // namespace tokamax::cpu
#endif  // HWY_ONCE
