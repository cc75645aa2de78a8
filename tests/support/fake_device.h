// A device of another kind than the CPU for tests of device checks (`supported_on`, `--device`):
// it describes itself and times on the wall clock, but has no ceilings of its own.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/clock.h"
#include "backends/device.h"

namespace tokamax::testing {

class FakeDevice final : public Device {
 public:
  explicit FakeDevice(std::string kind) {
    info_.kind = std::move(kind);
    info_.id = info_.kind + "-fake-test";
    info_.description = "a fake " + info_.kind + " device of the tests";
  }
  const DeviceInfo& info() const override { return info_; }
  const Ceilings& ceilings(bool) const override {
    throw std::logic_error("a fake device has no ceilings");
  }
  std::string ceilings_path() const override { return ""; }
  // The successive answers of the bandwidth probe (then 0).
  std::vector<double> probes;
  double probe_bandwidth_gbps() const override {
    return next_probe_ < probes.size() ? probes[next_probe_++] : 0;
  }
  const Memory& memory() const override { return host_memory(); }
  std::unique_ptr<Timer> timer() const override { return std::make_unique<WallTimer>(); }
  int64_t min_calls = 1;  // what min_calls_per_sample answers
  int64_t min_calls_per_sample() const override { return min_calls; }
  void synchronize() const override {}
  CacheSize last_level_cache() const override { return {0, "none"}; }
  std::vector<InfoRow> info_rows() const override { return {}; }
  nlohmann::json info_json() const override { return nlohmann::json::object(); }
  nlohmann::json measurement_context() const override { return nlohmann::json::object(); }

 private:
  DeviceInfo info_;
  mutable size_t next_probe_ = 0;
};

}  // namespace tokamax::testing
