// Times a list of cases in-process with adaptive sampling
// (cli/toolkit/measurement/measurement.h): warm-up, samples until the run noise settles or a cap
// is hit, optional cold caches, a drift probe around each case; writes Google Benchmark's JSON
// format (every sample plus the aggregates).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backends/device.h"
#include "cli/toolkit/measurement/measurement.h"

namespace tokamax {

// One timed unit: a single call of one implementation on inputs and outputs the caller has
// already allocated, so that only the kernel itself is timed.
struct BenchCase {
  std::string name;           // "<op>/<spec>/<impl>"; unique, also the Google Benchmark name
  std::function<void()> run;  // one call of the implementation; may throw to report a failure
  double flops = 0;           // per call
  double bytes = 0;           // per call (read + written)
  std::string label;          // the benchmark's label, e.g. compact JSON of config + source
  // Cold cache mode: makes `copies` independent sets of the inputs and outputs and returns a call
  // on set i (0 <= i < copies). Called once per case, before warm-up; the sets live until the
  // case is done. Absent: cold mode times run() on its one set (reported as 1 copy).
  std::function<std::function<void(int)>(int copies)> make_copies;
  int64_t footprint_bytes = 0;  // bytes of one set of inputs + outputs (the cold copy count)
};

struct BenchOptions {
  // Untimed calls before the first sample, once per case. At least one untimed call always
  // happens (it sizes the batches); cold mode calls every copy once (first-touch page faults).
  int warmup_runs = 2;
  StopRule stop;  // when to stop sampling (cli/toolkit/measurement/measurement.h)
  // Calls are batched so that one sample lasts about this long. Short samples are interrupted
  // less often on a busy machine (the robust estimator then sets the disturbed ones aside);
  // timer overhead is still < 0.1%.
  double sample_time_s = 5e-4;
  CacheMode cache_mode = CacheMode::kHot;
  int64_t llc_bytes = 0;    // cold mode: the device's last-level cache size (0: 1 copy)
  bool drift_probe = true;  // time the drift probe before and after each case
  // Measure the memory bandwidth (a triad) before and after each case
  // (cli/toolkit/measurement/measurement.h).
  bool bandwidth_probe = false;
  double max_drift = 0.05;  // flag a case whose probe times differ by more than this
  // Interleaved rounds: every case is timed once per round, the cases in order within a round
  // (A B C A B C ...), so that a machine whose speed moves from minute to minute slows all of
  // them alike and their per-round ratios stay comparable. Each round warms its case up again
  // and samples it under `stop`; the samples of all rounds are pooled (the batch size is the
  // first round's) and each round's median is kept (BenchStats::round_medians_s). With
  // bandwidth_probe each round probes before and after itself, and the case keeps the means.
  int rounds = 1;
  // When set, this file gets Google Benchmark's JSON (readable by its tools/compare.py): every
  // sample as a repetition plus the aggregates, named "<name>" and "<name>_<aggregate>".
  std::string json_path;
  // Extra keys of the JSON "context" object (device, build, command line, ...); the last
  // value wins for a repeated key. Keys Google Benchmark writes itself (date, host_name,
  // num_cpus, ...) would appear twice and must be avoided.
  std::vector<std::pair<std::string, std::string>> context;
};

// Per-call wall-clock times of one case. The timing fields come from the samples that
// completed; they stay 0 when none did.
struct BenchStats {
  std::string name;
  bool ok = true;     // false when run() threw (in warm-up or timing); the case stops there
  std::string error;  // the exception's message when !ok
  double median_s = 0;
  double min_s = 0;
  double max_s = 0;
  double mean_s = 0;
  double cv = 0;     // sample standard deviation / mean, a fraction (Google Benchmark's "cv")
  double iqr_s = 0;  // interquartile range, linear interpolation between order statistics
  std::vector<double> samples_s;  // one per sample (a batch of `iterations` calls), in order
  int64_t iterations = 0;         // calls per sample (the same for every sample)
  double gflops = 0;              // flops / median_s / 1e9
  double gbps = 0;                // bytes / median_s / 1e9
  // Adaptive sampling.
  double noise = 0;    // options.stop.estimator over samples_s (infinity below 2 samples)
  bool noisy = false;  // stopped by timeout or max_samples before the noise settled
  StopReason stop_reason = StopReason::kContinue;
  double elapsed_s = 0;      // wall time of the sampling phase
  int cache_copies = 1;      // sets of inputs + outputs cycled through (cold mode)
  DriftCheck drift;          // all zero when the probe is off
  BandwidthProbe bandwidth;  // all zero unless options.bandwidth_probe
  // The median of each completed round's samples, in round order (options.rounds; one entry
  // without rounds). A round that fails has none, and the rounds after it are not run.
  std::vector<double> round_medians_s;
};

// Times every case, in order (once per round with options.rounds > 1), on `device`'s timer (and
// its bandwidth probe when asked), and returns one BenchStats per case in the same order. A
// case whose run() throws is reported with ok = false (and an error entry in the JSON); the
// other cases still run. Real time is measured, not CPU time, because kernels are
// multithreaded.
// Serializes concurrent callers (Google Benchmark's custom context is a process-wide global),
// so it may be called any number of times in one process. Prints nothing.
//
// Throws InvalidArgument for bad options, an empty or duplicate case name, a case without
// run, or a json_path that cannot be opened for writing.
std::vector<BenchStats> run_benchmarks(const std::vector<BenchCase>& cases,
                                       const BenchOptions& options, const Device& device);

}  // namespace tokamax
