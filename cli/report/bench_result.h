// What `tokamax bench` knows about one benchmark: the case, the implementation and its config,
// the timings, and what follows from them (roofline, ratio to the best vendor). The printers
// (bench_report.h) render these as table rows and JSON records.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/toolkit/measurement/bench_sampler.h"
#include "ops/framework/dtype.h"

namespace tokamax::cli {

struct BenchResult {
  // The case.
  std::string op, spec, impl, dtype;
  nlohmann::json args;
  double flops = 0, bytes = 0;  // per call
  int64_t footprint_bytes = 0;  // one set of inputs + outputs (what cold mode copies)
  // The implementation.
  bool vendor = false;
  nlohmann::json backend = nlohmann::json::object();  // Implementation::describe()
  nlohmann::json config;
  std::string config_source;
  std::string unsupported;  // not empty: not run, and why
  // Not run because the implementation runs on another kind of device than the one benched (a
  // CUDA kernel on a CPU): the table leaves it out and lists it once below (other_device_notes).
  bool other_device = false;
  // The run.
  std::string failure;  // "" when it ran, else "error", "crash" or "timeout"
  BenchStats stats;
  NoiseEstimator estimator = NoiseEstimator::kIqrMedian;
  CacheMode cache_mode = CacheMode::kHot;
  // Derived: min(peak at the compute dtype, bandwidth x intensity), the bandwidth it used (the
  // probed one with --bandwidth-probe), the fraction reached, and the ratio to the best vendor
  // implementation of the same spec in this run (NaN where not defined).
  double roofline_gflops = 0;
  double roofline_bandwidth_gbps = 0;
  double roofline_fraction = NAN;
  double best_vendor_gflops = 0;
  double vs_best_vendor = NAN;
  // With interleaved rounds (bench --rounds): the ratio in each round, whose median is
  // vs_best_vendor; empty otherwise.
  std::vector<double> vs_best_vendor_rounds;

  bool ran() const { return unsupported.empty(); }
};

}  // namespace tokamax::cli
