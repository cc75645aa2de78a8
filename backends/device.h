// The backend seam: a device that kernels run on, as every layer above the backends sees it.
//
// A backend (backends/cpu/, later backends/cuda/) implements Device for each device it finds and
// lists it in the registry (backends/registry.h). The CLI resolves one target device (`--device`)
// and passes it down to every implementation: support checks, configs, heuristics and runs. A
// device says what it is (DeviceInfo: kind, id, model, kind-specific properties), what it can do
// at best (measured Ceilings), where its tensors live (Memory), how to time work on it (Timer,
// synchronize) and how large a cache a cold-cache benchmark must overflow.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backends/ceilings.h"
#include "backends/device_fault.h"
#include "backends/memory.h"

namespace tokamax {

// What a device is: what configs are tuned for, with a stable, filesystem-safe id.
struct DeviceInfo {
  std::string kind;         // the backend that runs it: "cpu"
  std::string id;           // [a-z0-9_-]: cache keys and the shipped cache's folder name
  std::string vendor;       // "GenuineIntel", "AuthenticAMD", ...
  std::string model;        // marketing name as reported by the OS or driver
  std::string arch;         // "x86_64", "aarch64", ...
  std::string description;  // one line for tables and records, written by the backend
  // Kind-specific facts, flat (cpu: isa, cores, l1d_bytes, l2_bytes, l3_bytes, simd_bytes).
  nlohmann::json properties = nlohmann::json::object();

  // {"id", "kind", "vendor", "model", "arch"} plus the properties.
  nlohmann::json to_json() const;
};

// Keeps [a-z0-9_-]; other characters become '-', runs collapse, ends are trimmed.
std::string sanitize_id(const std::string& text);

// Times work issued on a device: wall clock on the CPU (whose kernels return when done), events
// on a stream where kernels run asynchronously.
class Timer {
 public:
  virtual ~Timer() = default;
  virtual void start() = 0;
  // Seconds since start(), once the work issued in between has finished.
  virtual double stop() = 0;
  // The smallest difference of two readings the timer can tell apart, in seconds: a spread of
  // samples within it is the timer's, not the work's.
  virtual double resolution_s() const = 0;
};

// The cache a cold-cache benchmark must overflow between two uses of one set of buffers, and
// where its size came from ("sysfs", "sysconf", "fallback", ...).
struct CacheSize {
  int64_t bytes = 0;
  std::string source;
};

// A property and its value, one row of `tokamax info`.
using InfoRow = std::pair<std::string, std::string>;

class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceInfo& info() const = 0;
  const std::string& id() const { return info().id; }
  const std::string& kind() const { return info().kind; }

  // Measured ceilings: loaded from the store (ceilings_path()) or measured on first use and
  // stored; `remeasure` measures again. Thread-safe; a returned reference stays valid.
  virtual const Ceilings& ceilings(bool remeasure = false) const = 0;
  // Where the ceilings are stored; "" when nowhere (no user cache directory).
  virtual std::string ceilings_path() const = 0;
  // The memory bandwidth right now, GB/s (bench --bandwidth-probe), measured like the ceiling.
  virtual double probe_bandwidth_gbps() const = 0;

  // Where this device's tensors live.
  virtual const Memory& memory() const = 0;
  virtual std::unique_ptr<Timer> timer() const = 0;
  // The fewest calls a timed sample batches. An accelerator's first call after an idle moment
  // pays the host's launch latency with nothing queued to hide it; back-to-back calls overlap it
  // with the previous call's work, as an application's stream of launches does.
  virtual int64_t min_calls_per_sample() const { return 1; }
  // Returns once every kernel issued on this device so far has finished.
  virtual void synchronize() const = 0;
  // The cache cold-cache benchmarks overflow.
  virtual CacheSize last_level_cache() const = 0;

  // `tokamax info`: rows after "device id" and before the ceilings' timestamps, and the keys
  // this device adds to `info --json` (merged into {"device", "ceilings", "build"}).
  virtual std::vector<InfoRow> info_rows() const = 0;
  virtual nlohmann::json info_json() const = 0;
  // What bench records about how this device's memory was set up (tokamax.measurement).
  virtual nlohmann::json measurement_context() const = 0;
};

}  // namespace tokamax
