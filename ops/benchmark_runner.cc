// Times BenchCases with Google Benchmark in-process and turns its per-repetition runs into stats.
#include "ops/benchmark_runner.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <set>

#include "ops/errors.h"

namespace tokamax {
namespace {

// --- Statistics over one value per repetition.
// Also handed to Google Benchmark (ComputeStatistics), so the JSON aggregates and BenchStats
// agree. Google Benchmark passes accumulated times, which are per-call times scaled by the
// iteration count (equal across repetitions): all of these statistics scale along with them.

// Linear interpolation between order statistics (numpy's default); q = 0.5 gives the median
// exactly as Google Benchmark computes it.
double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double position = q * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return values[below] + fraction * (values[above] - values[below]);
}

double stat_min(const std::vector<double>& v) { return percentile(v, 0); }
double stat_max(const std::vector<double>& v) { return percentile(v, 1); }
double stat_iqr(const std::vector<double>& v) { return percentile(v, 0.75) - percentile(v, 0.25); }

double stat_mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// Sample standard deviation over the mean, as Google Benchmark's "cv" aggregate.
double stat_cv(const std::vector<double>& v) {
  const double mean = stat_mean(v);
  if (v.size() < 2 || mean == 0) return 0;
  double sum_sq = 0;
  for (double x : v) sum_sq += (x - mean) * (x - mean);
  return std::sqrt(sum_sq / static_cast<double>(v.size() - 1)) / mean;
}

// --- The benchmark function.
// Shared by all of one case's invocations: Google Benchmark calls the function once per
// repetition plus, in the first repetition, once per iteration-count probe. Warm-up belongs
// to the first invocation only, and after a failure the rest skip without calling run().
struct CaseState {
  bool warmed_up = false;
  bool failed = false;
  std::string error;
};

// Calls run(); on an exception records its message and returns false. Nothing may escape into
// Google Benchmark's runner, which would be left half-way through a repetition.
bool call_guarded(const BenchCase& bench_case, CaseState& state) {
  try {
    bench_case.run();
    return true;
  } catch (const std::exception& e) {
    state.error = e.what();
  } catch (...) {
    state.error = "unknown exception";
  }
  if (state.error.empty()) state.error = "exception with an empty message";
  state.failed = true;
  return false;
}

void time_case(benchmark::State& state, const BenchCase& bench_case, int warmup_runs,
               CaseState& case_state) {
  if (!case_state.warmed_up) {
    // Before the timing loop starts, so warm-up calls are outside the timed region.
    case_state.warmed_up = true;
    for (int i = 0; i < warmup_runs && !case_state.failed; ++i)
      call_guarded(bench_case, case_state);
  }
  // After SkipWithError the loop below ends without a single iteration.
  if (case_state.failed) state.SkipWithError(case_state.error.c_str());
  for (auto _ : state) {
    if (!call_guarded(bench_case, case_state)) {
      state.SkipWithError(case_state.error.c_str());
      break;
    }
  }
  state.SetLabel(bench_case.label);
  state.counters["flops"] = bench_case.flops;
  state.counters["bytes"] = bench_case.bytes;
  // Rate counters divide by the repetition's real time (UseRealTime) and multiply by the
  // iteration count: per-call flops * 1e-9 becomes GFLOP/s.
  state.counters["gflops"] =
      benchmark::Counter(bench_case.flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gbps"] =
      benchmark::Counter(bench_case.bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// --- Reporters.
// One repetition of one case, as the display reporter saw it.
struct Repetition {
  std::string name;
  bool error_occurred = false;
  std::string error_message;
  double seconds_per_call = 0;
  int64_t iterations = 0;
};

// Display reporter: prints nothing, keeps the per-repetition runs (aggregates are recomputed
// from these, which also covers a single repetition, where Google Benchmark computes none).
class CollectingReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration) continue;
      repetitions_.push_back(
          {run.run_name.function_name, run.error_occurred, run.error_message,
           run.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run.time_unit),
           static_cast<int64_t>(run.iterations)});
    }
  }
  const std::vector<Repetition>& repetitions() const { return repetitions_; }

 private:
  std::vector<Repetition> repetitions_;
};

// File reporter: Google Benchmark's JSON, with the "/min_time:.../repeats:.../real_time"
// suffixes dropped from the names, so that entries are "<name>" and "<name>_<aggregate>" and
// runs with different timing options still line up in tools/compare.py.
class CaseNameJsonReporter : public benchmark::JSONReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> renamed(runs);
    for (Run& run : renamed) {
      run.run_name.min_time.clear();
      run.run_name.min_warmup_time.clear();
      run.run_name.iterations.clear();
      run.run_name.repetitions.clear();
      run.run_name.time_type.clear();
    }
    JSONReporter::ReportRuns(renamed);
  }
};

// --- Global Google Benchmark state.

void require(bool condition, const std::string& message, const std::string& field = "") {
  if (!condition) throw InvalidArgument("benchmark: " + message, field);
}

void validate(const std::vector<BenchCase>& cases, const BenchOptions& options) {
  require(options.warmup_runs >= 0,
          "warmup_runs is " + std::to_string(options.warmup_runs) + " but must be >= 0",
          "warmup_runs");
  require(options.repetitions >= 1,
          "repetitions is " + std::to_string(options.repetitions) + " but must be >= 1",
          "repetitions");
  require(options.min_time_s > 0 && std::isfinite(options.min_time_s),
          "min_time_s is " + std::to_string(options.min_time_s) + " but must be > 0 seconds",
          "min_time_s");
  std::set<std::string> names;
  for (const BenchCase& bench_case : cases) {
    require(!bench_case.name.empty(), "a case has an empty name", "name");
    require(static_cast<bool>(bench_case.run), "case '" + bench_case.name + "' has no run", "run");
    require(names.insert(bench_case.name).second,
            "case name '" + bench_case.name + "' appears twice; names must be unique", "name");
  }
}

// Initialize() only overwrites the flags it is given, and they persist between calls: pass
// every one that changes what runs or where output goes, so an earlier call (or a
// BENCHMARK_* environment variable) cannot leak in. An empty --benchmark_out means no file.
void initialize_flags(const std::string& json_path) {
  // Google Benchmark keeps a pointer to argv[0] for the JSON context: it must outlive us.
  static char program[] = "tokamax";
  std::vector<std::string> flags = {
      "--benchmark_out=" + json_path,
      "--benchmark_out_format=json",
      "--benchmark_list_tests=false",
      "--benchmark_enable_random_interleaving=false",
      "--benchmark_report_aggregates_only=false",
      "--benchmark_display_aggregates_only=false",
  };
  std::vector<char*> argv = {program};
  for (std::string& flag : flags) argv.push_back(flag.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(argv.size()) - 1;
  benchmark::Initialize(&argc, argv.data());
}

// AddCustomContext refuses (with a warning) to replace a key, and the map outlives each run:
// clear it first. Shutdown() would delete it without resetting the pointer, so it is not used.
void set_context(const std::vector<std::pair<std::string, std::string>>& context) {
  if (std::map<std::string, std::string>* global = benchmark::internal::GetGlobalContext()) {
    global->clear();
  }
  std::map<std::string, std::string> merged;
  for (const auto& [key, value] : context) merged[key] = value;
  for (const auto& [key, value] : merged) benchmark::AddCustomContext(key, value);
}

BenchStats summarize(const BenchCase& bench_case, const CaseState& case_state,
                     const std::vector<Repetition>& repetitions) {
  BenchStats stats;
  stats.name = bench_case.name;
  for (const Repetition& repetition : repetitions) {
    if (repetition.name != bench_case.name) continue;
    if (repetition.error_occurred) {
      if (stats.ok) stats.error = repetition.error_message;
      stats.ok = false;
      continue;
    }
    stats.samples_s.push_back(repetition.seconds_per_call);
    stats.iterations = repetition.iterations;
  }
  if (stats.ok && (case_state.failed || stats.samples_s.empty())) {
    stats.ok = false;
    stats.error = case_state.failed ? case_state.error : "benchmark: no repetition was reported";
  }
  const std::vector<double>& samples = stats.samples_s;
  if (samples.empty()) return stats;
  stats.median_s = percentile(samples, 0.5);
  stats.min_s = stat_min(samples);
  stats.max_s = stat_max(samples);
  stats.mean_s = stat_mean(samples);
  stats.cv = stat_cv(samples);
  stats.iqr_s = stat_iqr(samples);
  if (stats.median_s > 0) {
    stats.gflops = bench_case.flops / stats.median_s * 1e-9;
    stats.gbps = bench_case.bytes / stats.median_s * 1e-9;
  }
  return stats;
}

// Clears the registry on every exit: the registered lambdas point into run_benchmarks' locals.
struct RegistryGuard {
  RegistryGuard() { benchmark::ClearRegisteredBenchmarks(); }
  ~RegistryGuard() { benchmark::ClearRegisteredBenchmarks(); }
};

}  // namespace

std::vector<BenchStats> run_benchmarks(const std::vector<BenchCase>& cases,
                                       const BenchOptions& options) {
  validate(cases, options);
  if (cases.empty()) return {};
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);

  // Google Benchmark calls exit(1) on a file it cannot open; find out first.
  require(options.json_path.empty() || std::ofstream(options.json_path).is_open(),
          "cannot open json_path '" + options.json_path + "' for writing", "json_path");
  RegistryGuard registry;
  initialize_flags(options.json_path);
  set_context(options.context);

  std::vector<CaseState> case_states(cases.size());  // sized once: lambdas hold references
  for (size_t i = 0; i < cases.size(); ++i) {
    const BenchCase& bench_case = cases[i];
    CaseState& case_state = case_states[i];
    benchmark::RegisterBenchmark(bench_case.name.c_str(),
                                 [&bench_case, &case_state, &options](benchmark::State& state) {
                                   time_case(state, bench_case, options.warmup_runs, case_state);
                                 })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)  // the JSON unit: kernel times are us to ms
        ->Repetitions(options.repetitions)
        ->MinTime(options.min_time_s)
        ->ReportAggregatesOnly(false)
        ->ComputeStatistics("min", &stat_min)
        ->ComputeStatistics("max", &stat_max)
        ->ComputeStatistics("iqr", &stat_iqr);
  }

  CollectingReporter display;
  const std::string all = ".";  // every registered name is non-empty, so this matches all
  if (options.json_path.empty()) {
    benchmark::RunSpecifiedBenchmarks(&display, all);
  } else {
    CaseNameJsonReporter file;
    benchmark::RunSpecifiedBenchmarks(&display, &file, all);
  }

  std::vector<BenchStats> results;
  results.reserve(cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    results.push_back(summarize(cases[i], case_states[i], display.repetitions()));
  return results;
}

}  // namespace tokamax
