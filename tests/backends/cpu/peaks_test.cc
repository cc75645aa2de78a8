// Tests for the ceiling measurements: quick runs return positive, finite figures (no timing bars).
#include "backends/cpu/peaks.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "backends/cpu/cpu_device.h"

using namespace tokamax;

namespace {

// A few milliseconds per kernel and a 12 MiB triad: enough to exercise every code path.
cpu::PeakOptions quick(int threads = 0) {
  cpu::PeakOptions options;
  options.seconds_per_kernel = 0.01;
  options.repetitions = 2;
  options.bandwidth_bytes = 12 << 20;
  options.threads = threads;
  return options;
}

bool positive_finite(double value) { return std::isfinite(value) && value > 0; }

}  // namespace

TEST_CASE("FMA peaks are positive and finite on one core and on all", "[peaks]") {
  for (int threads : {1, 0}) {
    INFO("threads " << threads);
    CHECK(positive_finite(cpu::measure_f32_fma_gflops(quick(threads))));
    CHECK(positive_finite(cpu::measure_f64_fma_gflops(quick(threads))));
  }
}

TEST_CASE("bf16 dot peak is measured exactly when the CPU has avx512_bf16", "[peaks]") {
  const double gflops = cpu::measure_bf16_dot_gflops(quick());
  if (cpu::host_cpu().has("avx512_bf16")) {
    CHECK(positive_finite(gflops));
  } else {
    WARN("no avx512_bf16 on this CPU: only the 'not available' path is checked");
    CHECK(gflops == 0);
  }
}

TEST_CASE("triad bandwidth is positive and finite, also for tiny and odd sizes", "[peaks]") {
  CHECK(positive_finite(cpu::measure_triad_gbps(quick())));
  cpu::PeakOptions tiny = quick(1);
  tiny.bandwidth_bytes = 1000;  // less than one block per array: still one block per thread
  CHECK(positive_finite(cpu::measure_triad_gbps(tiny)));
}

TEST_CASE("measure_peaks fills every field", "[peaks]") {
  const cpu::Peaks peaks = cpu::measure_peaks(quick());
  CHECK(positive_finite(peaks.f32_fma_gflops));
  CHECK(positive_finite(peaks.f64_fma_gflops));
  CHECK(std::isfinite(peaks.bf16_dot_gflops));
  CHECK(peaks.bf16_dot_gflops >= 0);
  CHECK(positive_finite(peaks.bandwidth_gbps));
}

TEST_CASE("bandwidth probe arrays: 4 x the LLC within 64..512 MiB", "[peaks]") {
  constexpr int64_t kMiB = int64_t{1} << 20;
  CHECK(cpu::bandwidth_probe_bytes(0) == 64 * kMiB);
  CHECK(cpu::bandwidth_probe_bytes(8 * kMiB) == 64 * kMiB);
  CHECK(cpu::bandwidth_probe_bytes(32 * kMiB) == 128 * kMiB);
  CHECK(cpu::bandwidth_probe_bytes(384 * kMiB) == 512 * kMiB);
}

TEST_CASE("int8 dot peak is measured exactly when the CPU has avx512_vnni", "[peaks]") {
  const double gops = cpu::measure_int8_dot_gflops(quick());
  if (cpu::host_cpu().has("avx512_vnni")) {
    CHECK(positive_finite(gops));
    // 64 products an instruction against vdpbf16ps's 32: at least the bf16 rate where both run.
    if (cpu::host_cpu().has("avx512_bf16")) CHECK(gops > 0.8 * cpu::measure_bf16_dot_gflops(quick()));
  } else {
    WARN("no avx512_vnni on this CPU: only the 'not available' path is checked");
    CHECK(gops == 0);
  }
}
