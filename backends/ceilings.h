// A device's measured ceilings (compute peaks, memory bandwidth) and their per-device store.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

namespace tokamax {

// What a kernel on the device can reach at best, all of it together. Which peak applies to a
// kernel depends on the dtype its arithmetic runs at (cli/toolkit/measurement/roofline.h).
struct Ceilings {
  double f32_fma_gflops = 0;
  double f64_fma_gflops = 0;
  double bf16_dot_gflops = 0;  // native bf16 dot product (GPU: tensor cores); 0 = none
  double f16_dot_gflops = 0;   // native f16 dot product (GPU: tensor cores); 0 = none
  // native int8 dot product in GOP/s, 2 ops per product (CPU: vpdpbusd); 0 = none or unmeasured
  double int8_dot_gflops = 0;
  // CPU matrix units (AMX tiles: TDPBF16PS, TDPBUSD), which outrun the vector dot products;
  // 0 = none, or not usable by the process
  double amx_bf16_gflops = 0;
  double amx_int8_gflops = 0;
  double bandwidth_gbps = 0;  // streaming bandwidth (CPU: STREAM triad, write-allocate not counted)
  std::string device_id;      // the DeviceInfo id the figures belong to
  std::string measured_at;    // UTC, ISO 8601 ("2025-01-31T12:00:00Z")

  // Sorted keys plus "format_version".
  nlohmann::json to_json() const;
  // Throws std::invalid_argument naming the field: missing, wrong type, unknown, not finite, or
  // a peak that is not positive (the dot and AMX peaks may be 0; f16_dot_gflops,
  // int8_dot_gflops and the AMX peaks may be absent, as in files stored before they existed).
  static Ceilings from_json(const nlohmann::json& json);
};

// Where ceilings for `device_id` are stored: device-<id>.json in the user cache folder
// (backends/user_dirs.h). Throws when there is none.
std::string ceilings_path(const std::string& device_id);

struct CeilingsLookup {
  Ceilings ceilings;
  bool measured = false;  // true: `measure` ran in this call (nothing valid was stored)
};

// Returns the ceilings stored at `path` when they parse and belong to `device_id`; otherwise (or
// with `remeasure`) runs `measure` (its rates are kept; id and time are stamped here) and stores
// the result atomically. A corrupt file or one for another device is replaced; such problems and
// a failed store are reported on `log` as warnings, never thrown. Concurrent processes measure
// one at a time (a lock file), so that they do not slow each other's measurement down.
CeilingsLookup load_or_measure_ceilings(const std::string& path, const std::string& device_id,
                                        const std::function<Ceilings()>& measure, bool remeasure,
                                        std::ostream& log);

// ISO-8601 UTC now, e.g. "2026-11-29T10:15:00Z".
std::string utc_now();

}  // namespace tokamax
