// Times a list of cases in-process with Google Benchmark: warm-up, repetitions, statistics, JSON.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tokamax {

// One timed unit: a single call of one implementation on inputs and outputs the caller has
// already allocated, so that only the kernel itself is timed.
struct BenchCase {
  std::string name;           // "<op>/<spec>/<impl>"; unique, also the Google Benchmark name
  std::function<void()> run;  // one call of the implementation; may throw to report a failure
  double flops = 0;           // per call
  double bytes = 0;           // per call (read + written)
  std::string label;          // the benchmark's label, e.g. compact JSON of config + source
};

struct BenchOptions {
  int warmup_runs = 2;       // untimed calls before the first timed one, once per case
  int repetitions = 5;       // Google Benchmark repetitions; statistics are taken over these
  double min_time_s = 0.05;  // minimum timed wall time of each repetition
  // When set, Google Benchmark's JSON reporter writes this file (readable by its
  // tools/compare.py): every repetition plus the aggregates, named "<name>" and
  // "<name>_<aggregate>".
  std::string json_path;
  // Extra keys of the JSON "context" object (device, build, command line, ...); the last
  // value wins for a repeated key. Keys already used by Google Benchmark (date, host_name,
  // num_cpus, ...) would appear twice and must be avoided.
  std::vector<std::pair<std::string, std::string>> context;
};

// Per-call wall-clock times of one case. The timing fields come from the repetitions that
// completed; they stay 0 when none did.
struct BenchStats {
  std::string name;
  bool ok = true;     // false when run() threw (in warm-up or timing); later repetitions skip
  std::string error;  // the exception's message when !ok
  double median_s = 0;
  double min_s = 0;
  double max_s = 0;
  double mean_s = 0;
  double cv = 0;     // sample standard deviation / mean, a fraction (Google Benchmark's "cv")
  double iqr_s = 0;  // interquartile range, linear interpolation between order statistics
  std::vector<double> samples_s;  // one per completed repetition
  int64_t iterations = 0;         // calls per repetition (the same for every repetition)
  double gflops = 0;              // flops / median_s / 1e9
  double gbps = 0;                // bytes / median_s / 1e9
};

// Times every case, in order, and returns one BenchStats per case in the same order. A case
// whose run() throws is reported with ok = false (and SkipWithError in the JSON); the other
// cases still run. Real time is measured, not CPU time, because kernels are multithreaded.
//
// Google Benchmark keeps its registry, flags and custom context in process-wide globals: this
// function clears every registered benchmark before and after it runs, resets the flags and
// context it depends on, and serializes concurrent callers, so it may be called any number of
// times in one process. Prints nothing.
//
// Throws InvalidArgument for bad options, an empty or duplicate case name, a case without
// run, or a json_path that cannot be opened for writing.
std::vector<BenchStats> run_benchmarks(const std::vector<BenchCase>& cases,
                                       const BenchOptions& options);

}  // namespace tokamax
