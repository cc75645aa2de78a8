// The CPU backend's Device: the host CPU (or a described one) with its measured ceilings, host
// memory and a wall-clock timer.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "backends/cpu/cpu_info.h"
#include "backends/device.h"

namespace tokamax::cpu {

class CpuDevice final : public Device {
 public:
  // `is_host`: this machine's CPU, whose ceilings and bandwidth can be measured. Otherwise a
  // described CPU (another machine's /proc/cpuinfo): configs and heuristics can be resolved for
  // it, but nothing measured or run.
  CpuDevice(CpuInfo cpu, bool is_host);

  const CpuInfo& cpu() const { return cpu_; }
  bool is_host() const { return is_host_; }

  const DeviceInfo& info() const override { return info_; }
  const Ceilings& ceilings(bool remeasure = false) const override;
  std::string ceilings_path() const override;
  double probe_bandwidth_gbps() const override;
  const Memory& memory() const override;
  std::unique_ptr<Timer> timer() const override;
  // CPU kernels return when they are done (the pool joins its tasks): nothing is in flight.
  void synchronize() const override {}
  CacheSize last_level_cache() const override;
  std::vector<InfoRow> info_rows() const override;
  nlohmann::json info_json() const override;
  nlohmann::json measurement_context() const override;

 private:
  void require_host(const char* what) const;

  CpuInfo cpu_;
  DeviceInfo info_;
  bool is_host_;
  mutable std::mutex mutex_;
  // Every version ever returned stays alive, so a remeasure cannot leave a caller holding a
  // dangling reference (a handful of small objects per process at most).
  mutable std::vector<std::unique_ptr<Ceilings>> ceilings_;
};

// This machine's CPU as a device, created on first use.
const CpuDevice& host_device();

// The CPU facts of a CPU device (what CPU heuristics and checks read). Throws
// std::invalid_argument for a device of another kind: CPU implementations only see CPU devices,
// as their supported_on() says.
const CpuInfo& cpu_info(const Device& device);

}  // namespace tokamax::cpu
