// The measured roofline of this device: ceilings stored once per device, and the bound math.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "backends/cpu/peaks.h"
#include "ops/framework/dtype.h"

namespace tokamax::cpu {

// What a kernel on this device can reach at best: all cores together, as measured by peaks.h.
struct Ceilings {
  double f32_fma_gflops = 0;
  double f64_fma_gflops = 0;
  double bf16_dot_gflops = 0;  // native bf16 dot product; 0 = the CPU has none
  double bandwidth_gbps = 0;   // STREAM triad, write-allocate traffic not counted
  std::string device_id;       // the DeviceInfo id the figures belong to
  std::string measured_at;     // UTC, ISO 8601 ("2025-01-31T12:00:00Z")

  static Ceilings from_peaks(const Peaks& peaks, std::string device_id, std::string measured_at);
  // Sorted keys plus "format_version".
  nlohmann::json to_json() const;
  // Throws InvalidArgument naming the field: missing, wrong type, unknown, not finite, or a peak
  // that is not positive (bf16_dot_gflops may be 0).
  static Ceilings from_json(const nlohmann::json& json);

  // The compute ceiling for kernels whose arithmetic runs in `compute`:
  //   bf16 -> max(native bf16 dot, f32 FMA): a kernel may convert to f32 and use FMAs instead;
  //   f16, f32 -> f32 FMA (f16 is converted to f32 here; native f16 FMAs are not measured);
  //   f64 -> f64 FMA (half the f32 FMA peak when unmeasured).
  // Throws InvalidArgument for i32.
  double peak_gflops(DType compute) const;
};

// Attainable GFLOP/s for `flops` over `bytes` of memory traffic: min(peak, bandwidth x flops /
// bytes). GB/s times flop/byte is GFLOP/s; bytes <= 0 means no traffic, i.e. compute-bound.
double roofline_gflops(const Ceilings& ceilings, double flops, double bytes, DType compute);

// Where ceilings for `device_id` are stored: device-<id>.json next to the user autotuning cache
// ($XDG_CACHE_HOME/tokamax or ~/.cache/tokamax). Throws when neither variable locates it.
std::string ceilings_path(const std::string& device_id);

struct CeilingsLookup {
  Ceilings ceilings;
  bool measured = false;  // true: `measure` ran in this call (nothing valid was stored)
};

// Returns the ceilings stored at `path` when they parse and belong to `device_id`; otherwise (or
// with `remeasure`) runs `measure`, stamps the result and stores it atomically (temporary file +
// rename). A corrupt file or one for another device is replaced; such problems and a failed
// store are reported on `log` as warnings, never thrown.
CeilingsLookup load_or_measure_ceilings(const std::string& path, const std::string& device_id,
                                        const std::function<Peaks()>& measure, bool remeasure,
                                        std::ostream& log);

// The host's ceilings, loaded or measured (about 1-2 s, once per device) on first use and kept
// for the process; `remeasure` measures again and replaces the stored file. Thread-safe; a
// reference stays valid after a later remeasure.
const Ceilings& host_ceilings(bool remeasure = false);

// ceilings_path() of the host, or "" when there is no user cache directory (nothing is stored).
std::string host_ceilings_path();

}  // namespace tokamax::cpu
