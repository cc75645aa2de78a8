// Measured hardware ceilings of the host CPU: FMA and bf16-dot peaks, STREAM-style bandwidth.
#pragma once

#include <cstdint>
#include <string>

namespace tokamax::cpu {

// How long and how wide to measure. The defaults take about 1-2 s on the whole and aim at the
// true ceilings; tests pass small values for a quick, merely plausible figure.
struct PeakOptions {
  double seconds_per_kernel = 0.3;  // per compute kernel (f32, f64, bf16), all repetitions
  int repetitions = 5;              // best of: a shared machine only ever slows a run down
  // Total bytes of the three triad arrays; 0 = max(8 x L3, 256 MiB), capped at 1 GiB and at a
  // quarter of physical memory.
  int64_t bandwidth_bytes = 0;
  int threads = 0;  // 0 = every core of the process-wide pool
};

// All rates are for every used core together.
struct Peaks {
  double f32_fma_gflops = 0;   // 2 flops per lane per FMA, widest vector (Highway dispatch)
  double f64_fma_gflops = 0;   // the same with f64 lanes
  double bf16_dot_gflops = 0;  // native vdpbf16ps, 2 flops per bf16 product; 0 = not available
  double int8_dot_gflops = 0;  // native vpdpbusd, 2 ops per u8 x s8 product; 0 = not available
  // The AMX units (backends/cpu/amx.h), 0 where this process cannot use them.
  double amx_bf16_gflops = 0;  // TDPBF16PS, 2 flops per bf16 product
  double amx_int8_gflops = 0;  // TDPBUSD, 2 ops per u8 x s8 product (GOP/s)
  double bandwidth_gbps = 0;   // triad a = b + s*c on f64, 24 bytes/element (no write-allocate)
};

double measure_f32_fma_gflops(const PeakOptions& options = {});
double measure_f64_fma_gflops(const PeakOptions& options = {});
// 0 when the CPU lacks avx512_bf16 (the bf16 path then runs as conversion + f32 FMAs, whose
// ceiling is the f32 FMA peak).
double measure_bf16_dot_gflops(const PeakOptions& options = {});
// 0 when the CPU lacks avx512_vnni.
double measure_int8_dot_gflops(const PeakOptions& options = {});
// 0 unless host_amx() allows the unit (the tiles are never emulated here: a peak is hardware's).
double measure_amx_bf16_gflops(const PeakOptions& options = {});
double measure_amx_int8_gflops(const PeakOptions& options = {});
double measure_triad_gbps(const PeakOptions& options = {});
Peaks measure_peaks(const PeakOptions& options = {});

// The triad arrays of a bandwidth probe (bench --bandwidth-probe): 4 x llc_bytes in all, so that
// the probe streams from memory, not the cache, clamped to [64 MiB, 512 MiB]. About 0.1-0.3 s for
// the best of 3 repetitions.
int64_t bandwidth_probe_bytes(int64_t llc_bytes);

}  // namespace tokamax::cpu
