// Times BenchCases with adaptive sampling and reports them in Google Benchmark's JSON format.
#include "cli/toolkit/measurement/bench_sampler.h"

#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>

#include "backends/clock.h"
#include "backends/device.h"
#include "ops/framework/errors.h"

namespace tokamax {
namespace {

// --- Statistics over one value per sample (also applied to the counters of the aggregates).

// (quantile: measurement.h; every list here has at least one sample.)
double stat_median(const std::vector<double>& v) { return quantile(v, 0.5); }
double stat_min(const std::vector<double>& v) { return quantile(v, 0); }
double stat_max(const std::vector<double>& v) { return quantile(v, 1); }
double stat_iqr(const std::vector<double>& v) { return quantile(v, 0.75) - quantile(v, 0.25); }

double stat_mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double stat_stddev(const std::vector<double>& v) {
  const double mean = stat_mean(v);
  if (v.size() < 2) return 0;
  double sum_sq = 0;
  for (double x : v) sum_sq += (x - mean) * (x - mean);
  return std::sqrt(sum_sq / static_cast<double>(v.size() - 1));
}

// Sample standard deviation over the mean, as Google Benchmark's "cv" aggregate.
double stat_cv(const std::vector<double>& v) {
  const double mean = stat_mean(v);
  return mean == 0 ? 0 : stat_stddev(v) / mean;
}

// The aggregates written after a case's samples, in Google Benchmark's order plus ours.
struct Aggregate {
  const char* name;
  double (*compute)(const std::vector<double>&);
  bool percentage;  // a unitless fraction (cv), not a time
};
constexpr Aggregate kAggregates[] = {
    {"mean", &stat_mean, false}, {"median", &stat_median, false}, {"stddev", &stat_stddev, false},
    {"cv", &stat_cv, true},      {"min", &stat_min, false},       {"max", &stat_max, false},
    {"iqr", &stat_iqr, false}};

// --- Clocks: the device's timer for the calls, the wall clock for the sampling phase, and the
// process CPU time that Google Benchmark's JSON reports beside the real time.

double process_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// --- One case.

// One sample: `iterations` calls taking `real_s` wall and `cpu_s` process CPU seconds.
struct Sample {
  double real_s = 0, cpu_s = 0;
};

struct CaseRun {
  BenchStats stats;
  std::vector<Sample> samples;
};

// Calls fn(); on an exception records its message in `stats` and returns false. Nothing may
// escape: the other cases still run.
template <typename Fn>
bool guarded(BenchStats& stats, Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const DeviceFault&) {
    throw;  // the process cannot go on with this device (backends/device.h)
  } catch (const std::exception& e) {
    stats.error = e.what();
  } catch (...) {
    stats.error = "unknown exception";
  }
  if (stats.error.empty()) stats.error = "exception with an empty message";
  stats.ok = false;
  return false;
}

void summarize(const BenchCase& bench_case, BenchStats& stats) {
  const std::vector<double>& samples = stats.samples_s;
  if (samples.empty()) return;
  stats.median_s = stat_median(samples);
  stats.min_s = stat_min(samples);
  stats.max_s = stat_max(samples);
  stats.mean_s = stat_mean(samples);
  stats.cv = stat_cv(samples);
  stats.iqr_s = stat_iqr(samples);
  if (stats.median_s > 0) {
    stats.gflops = bench_case.flops / stats.median_s * 1e-9;
    stats.gbps = bench_case.bytes / stats.median_s * 1e-9;
  }
}

// One round of one case. `batch` is the calls per sample; 0: sized from the warm-up.
CaseRun time_case(const BenchCase& bench_case, const BenchOptions& options, const Device& device,
                  int64_t batch = 0) {
  CaseRun result;
  BenchStats& stats = result.stats;
  stats.name = bench_case.name;
  if (options.drift_probe) stats.drift.before_s = time_drift_probe();
  if (options.bandwidth_probe) stats.bandwidth.before_gbps = device.probe_bandwidth_gbps();
  const std::unique_ptr<Timer> timer = device.timer();

  // The call on copy i; hot mode (or a case without copies) always uses the one set.
  std::function<void(int)> call = [&bench_case](int) { bench_case.run(); };
  int copies = 1;
  if (options.cache_mode == CacheMode::kCold && bench_case.make_copies) {
    copies = cold_copies(bench_case.footprint_bytes, options.llc_bytes);
    std::function<void(int)> cold;
    if (guarded(stats, [&] { cold = bench_case.make_copies(copies); })) call = std::move(cold);
  }
  stats.cache_copies = copies;

  // Warm-up: at least one call (it sizes the batches), and in cold mode each copy once.
  const int warmup = std::max({options.warmup_runs, 1, copies > 1 ? copies : 0});
  double one_call = std::numeric_limits<double>::infinity();
  int next_copy = 0;
  for (int i = 0; i < warmup && stats.ok; ++i) {
    timer->start();
    guarded(stats, [&] { call(next_copy); });
    next_copy = (next_copy + 1) % copies;
    one_call = std::min(one_call, timer->stop());
  }

  if (stats.ok) {
    if (batch <= 0) {
      batch =
          std::max(device.min_calls_per_sample(),
                   static_cast<int64_t>(std::clamp(
                       std::round(options.sample_time_s / std::max(one_call, 1e-9)), 1.0, 1e6)));
    }
    stats.iterations = batch;
    double timed = 0;
    const double begin = wall_seconds();
    StopDecision decision;
    while (!decision.stop()) {
      const double cpu_start = process_cpu_s();
      timer->start();
      const bool ok = guarded(stats, [&] {
        for (int64_t i = 0; i < batch; ++i) {
          call(next_copy);
          if (++next_copy == copies) next_copy = 0;
        }
      });
      const double real = timer->stop();
      if (!ok) break;
      result.samples.push_back({real, process_cpu_s() - cpu_start});
      stats.samples_s.push_back(real / static_cast<double>(batch));
      timed += real;
      decision = should_stop(stats.samples_s, timed, wall_seconds() - begin, options.stop,
                             timer->resolution_s() / static_cast<double>(batch));
    }
    stats.elapsed_s = wall_seconds() - begin;
    stats.noise = decision.noise;
    stats.noisy = stats.ok && decision.noisy();
    stats.stop_reason = decision.reason;
  }
  call = nullptr;  // frees the cold copies before the probe

  if (options.drift_probe) {
    stats.drift = check_drift(stats.drift.before_s, time_drift_probe(), options.max_drift);
  }
  if (options.bandwidth_probe) stats.bandwidth.after_gbps = device.probe_bandwidth_gbps();
  summarize(bench_case, stats);
  if (stats.ok && !stats.samples_s.empty()) stats.round_medians_s = {stats.median_s};
  return result;
}

// Adds round `index` (>= 1) of the same case to `total`: the samples pooled, the statistics over
// all of them, noisy or drifted when any round was, the drift probe from the first round's start
// to this round's end, the bandwidth probes the mean of every round's (a failure ends the case:
// its error is kept).
void add_round(const BenchCase& bench_case, const StopRule& stop, double max_drift, int index,
               CaseRun& total, CaseRun&& round) {
  BenchStats& s = total.stats;
  const BenchStats& r = round.stats;
  s.ok = r.ok;
  s.error = r.error;
  total.samples.insert(total.samples.end(), round.samples.begin(), round.samples.end());
  s.samples_s.insert(s.samples_s.end(), r.samples_s.begin(), r.samples_s.end());
  s.round_medians_s.insert(s.round_medians_s.end(), r.round_medians_s.begin(),
                           r.round_medians_s.end());
  s.noisy = s.noisy || r.noisy;
  s.stop_reason = r.stop_reason;
  s.elapsed_s += r.elapsed_s;
  s.noise = relative_noise(s.samples_s, stop.estimator);
  if (r.drift.before_s > 0) {
    const bool drifted = s.drift.drifted || r.drift.drifted;
    s.drift = check_drift(s.drift.before_s, r.drift.after_s, max_drift);
    s.drift.drifted = s.drift.drifted || drifted;
  }
  const double before = s.bandwidth.before_gbps * index + r.bandwidth.before_gbps;
  const double after = s.bandwidth.after_gbps * index + r.bandwidth.after_gbps;
  s.bandwidth.before_gbps = before / (index + 1);
  s.bandwidth.after_gbps = after / (index + 1);
  summarize(bench_case, s);
}

// --- Google Benchmark JSON.

using Run = benchmark::BenchmarkReporter::Run;

Run base_run(const BenchCase& bench_case, size_t case_index, int64_t num_samples) {
  Run run;
  run.run_name.function_name = bench_case.name;
  run.family_index = static_cast<int64_t>(case_index);
  run.per_family_instance_index = 0;
  run.report_label = bench_case.label;
  run.threads = 1;
  run.repetitions = num_samples;
  run.repetition_index = Run::no_repetition_index;
  run.time_unit = benchmark::kMicrosecond;  // kernel times are us to ms
  run.statistics = nullptr;
  return run;
}

// Counters of one sample (rates are per second of that sample), or of one aggregate.
void set_counters(Run& run, double flops, double bytes, double gflops, double gbps) {
  run.counters["flops"] = flops;
  run.counters["bytes"] = bytes;
  run.counters["gflops"] = gflops;
  run.counters["gbps"] = gbps;
}

// Every sample as a repetition ("iteration" entries), then the aggregates over them.
std::vector<Run> case_runs(const BenchCase& bench_case, size_t case_index, const CaseRun& result) {
  const BenchStats& stats = result.stats;
  const int64_t n = static_cast<int64_t>(result.samples.size());
  std::vector<Run> runs;
  if (!stats.ok && n == 0) {
    Run run = base_run(bench_case, case_index, 1);
    run.repetition_index = 0;
    run.error_occurred = true;
    run.error_message = stats.error;
    run.iterations = 0;
    runs.push_back(run);
    return runs;
  }
  std::vector<double> flops, bytes, gflops, gbps;
  for (int64_t r = 0; r < n; ++r) {
    const Sample& sample = result.samples[static_cast<size_t>(r)];
    Run run = base_run(bench_case, case_index, n);
    run.repetition_index = r;
    run.iterations = stats.iterations;
    run.real_accumulated_time = sample.real_s;
    run.cpu_accumulated_time = sample.cpu_s;
    const double per_call = stats.samples_s[static_cast<size_t>(r)];
    flops.push_back(bench_case.flops);
    bytes.push_back(bench_case.bytes);
    gflops.push_back(per_call > 0 ? bench_case.flops / per_call * 1e-9 : 0);
    gbps.push_back(per_call > 0 ? bench_case.bytes / per_call * 1e-9 : 0);
    set_counters(run, flops.back(), bytes.back(), gflops.back(), gbps.back());
    runs.push_back(run);
  }
  if (!stats.ok) {
    // A failure after some samples: the samples stay, then one error entry.
    Run run = base_run(bench_case, case_index, n);
    run.repetition_index = n;
    run.error_occurred = true;
    run.error_message = stats.error;
    run.iterations = 0;
    runs.push_back(run);
    return runs;
  }
  std::vector<double> cpu_per_call;
  for (const Sample& sample : result.samples)
    cpu_per_call.push_back(sample.cpu_s / static_cast<double>(stats.iterations));
  for (const Aggregate& aggregate : kAggregates) {
    Run run = base_run(bench_case, case_index, n);
    run.run_type = Run::RT_Aggregate;
    run.aggregate_name = aggregate.name;
    run.iterations = stats.iterations;
    const double real = aggregate.compute(stats.samples_s);
    const double cpu = aggregate.compute(cpu_per_call);
    if (aggregate.percentage) {
      run.aggregate_unit = benchmark::kPercentage;
      run.real_accumulated_time = real;  // written as is
      run.cpu_accumulated_time = cpu;
    } else {
      run.aggregate_unit = benchmark::kTime;
      run.real_accumulated_time = real * static_cast<double>(stats.iterations);
      run.cpu_accumulated_time = cpu * static_cast<double>(stats.iterations);
    }
    set_counters(run, aggregate.compute(flops), aggregate.compute(bytes), aggregate.compute(gflops),
                 aggregate.compute(gbps));
    runs.push_back(run);
  }
  return runs;
}

// AddCustomContext refuses (with a warning) to replace a key, and the map outlives each run:
// clear it first.
void set_context(const std::vector<std::pair<std::string, std::string>>& context) {
  if (std::map<std::string, std::string>* global = benchmark::internal::GetGlobalContext()) {
    global->clear();
  }
  std::map<std::string, std::string> merged;
  for (const auto& [key, value] : context) merged[key] = value;
  for (const auto& [key, value] : merged) benchmark::AddCustomContext(key, value);
}

// --- Validation.

void require(bool condition, const std::string& message, const std::string& field = "") {
  if (!condition) throw InvalidArgument("benchmark: " + message, field);
}

void validate(const std::vector<BenchCase>& cases, const BenchOptions& options) {
  require(options.warmup_runs >= 0,
          "warmup_runs is " + std::to_string(options.warmup_runs) + " but must be >= 0",
          "warmup_runs");
  require(options.sample_time_s > 0 && std::isfinite(options.sample_time_s),
          "sample_time_s must be > 0 seconds", "sample_time_s");
  require(options.max_drift >= 0 && !std::isnan(options.max_drift), "max_drift must be >= 0",
          "max_drift");
  require(options.llc_bytes >= 0, "llc_bytes must be >= 0", "llc_bytes");
  require(options.rounds >= 1, "rounds is " + std::to_string(options.rounds) + " but must be >= 1",
          "rounds");
  validate(options.stop);
  std::set<std::string> names;
  for (const BenchCase& bench_case : cases) {
    require(!bench_case.name.empty(), "a case has an empty name", "name");
    require(static_cast<bool>(bench_case.run), "case '" + bench_case.name + "' has no run", "run");
    require(names.insert(bench_case.name).second,
            "case name '" + bench_case.name + "' appears twice; names must be unique", "name");
  }
}

}  // namespace

std::vector<BenchStats> run_benchmarks(const std::vector<BenchCase>& cases,
                                       const BenchOptions& options, const Device& device) {
  validate(cases, options);
  if (cases.empty()) return {};
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);

  std::unique_ptr<std::ofstream> file;
  std::unique_ptr<benchmark::JSONReporter> reporter;
  if (!options.json_path.empty()) {
    file = std::make_unique<std::ofstream>(options.json_path);
    require(file->is_open(), "cannot open json_path '" + options.json_path + "' for writing",
            "json_path");
    set_context(options.context);
    // Initialize() would set this from argv[0]; the context writer reads it.
    if (benchmark::BenchmarkReporter::Context::executable_name == nullptr) {
      benchmark::BenchmarkReporter::Context::executable_name = "tokamax";
    }
    reporter = std::make_unique<benchmark::JSONReporter>();
    reporter->SetOutputStream(file.get());
    reporter->SetErrorStream(file.get());
    reporter->ReportContext(benchmark::BenchmarkReporter::Context());
  }

  std::vector<CaseRun> runs(cases.size());
  for (int round = 0; round < options.rounds; ++round) {
    for (size_t i = 0; i < cases.size(); ++i) {
      if (round == 0) {
        runs[i] = time_case(cases[i], options, device);
      } else if (runs[i].stats.ok) {
        add_round(cases[i], options.stop, options.max_drift, round, runs[i],
                  time_case(cases[i], options, device, runs[i].stats.iterations));
      }
    }
  }
  std::vector<BenchStats> results;
  results.reserve(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    if (reporter) reporter->ReportRuns(case_runs(cases[i], i, runs[i]));
    results.push_back(runs[i].stats);
  }
  if (reporter) {
    reporter->Finalize();
    file->flush();
  }
  return results;
}

}  // namespace tokamax
