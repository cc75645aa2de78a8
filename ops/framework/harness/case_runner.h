// The interface the commands run implementations through: a CaseRunner holds one case (op, args,
// seed, device) and times, checks and benchmarks implementations on it.
//
// Two runners implement it: LocalRunner runs in this process (`--isolation none`,
// local_runner.h); WorkerRunner sends every request to a worker process that survives nothing of
// what a candidate does to it (`--isolation worker`, the default, worker_runner.h). setup()
// generates the case's inputs in host memory and moves them once to the device's memory (and,
// on demand, computes the float64 oracle); time(), check() and bench() then run
// implementations on them. Transfers are never timed.
//
// Failure categories of one run, the same words in every command's output:
//   ok        ran (check: compare `comparisons` to decide; bench: stats are valid)
//   error     the implementation threw (an exception message in `reason`)
//   crash     the worker died: a signal (SIGSEGV, SIGABRT, ...) or an unexpected exit
//   timeout   no answer within the timeout; the worker was killed
//   unsupported (check only) the implementation threw NotImplemented while running
// The callers add `invalid` (check_config rejected the config) and `numerics` (outputs out of
// the error bound).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ops/framework/bound_args.h"
#include "ops/framework/measurement/bench_sampler.h"
#include "ops/framework/measurement/timing.h"
#include "ops/framework/numerics.h"
#include "ops/framework/op.h"

namespace tokamax {

// The case a runner holds.
struct CaseSetup {
  std::string op;  // registry name (find_op)
  BoundArgs args;
  std::string device;  // registry name or id (find_device); empty: the default device
  uint64_t seed = 0;
  double oracle_budget = kDefaultOracleBudget;  // float64 multiply-adds before sampling
  // When set: inputs and oracle are written there as .npy (verify --dump-dir).
  std::string dump_dir;

  bool same_case(const CaseSetup& other) const;  // op, args, device, seed, budget (not dump_dir)
};

// time(): per-call samples in seconds, unchanged from where they were measured.
struct TimeResult {
  std::string status = "ok";  // ok, error, crash, timeout
  std::string reason;
  std::vector<double> samples;
};

// check(): one run into zeroed outputs, compared to the oracle output by output.
struct CheckResult {
  std::string status = "ok";  // ok, error, crash, timeout, unsupported
  std::string reason;
  std::map<std::string, Comparison> comparisons;  // output name -> comparison (status ok)
};

// bench(): one implementation timed with Google Benchmark
// (ops/framework/measurement/bench_sampler.h).
struct BenchJob {
  const Implementation* impl = nullptr;
  nlohmann::json config;
  std::string name;  // "<op>/<spec>/<impl>", unique
  double flops = 0, bytes = 0;
  std::string label;
};
struct BenchOutcome {
  std::string status = "ok";  // ok, error, crash, timeout
  BenchStats stats;           // stats.ok == (status == "ok"); stats.error says why not
};

class CaseRunner {
 public:
  virtual ~CaseRunner() = default;
  // Makes `setup` the current case (nothing to do when it already is, except dumping). Errors of
  // the op itself (input generation) throw.
  virtual void setup(const CaseSetup& setup) = 0;
  // Times impl with config on the current case: time_calls, or with warmup_runs == 0 the lean
  // variant of tune's halving (the first call calibrates the batch and counts as a sample when it
  // alone lasts a sample).
  virtual TimeResult time(const Implementation& impl, const nlohmann::json& config,
                          const TimingOptions& timing) = 0;
  // Runs once into zeroed outputs and compares every output with the oracle; with `dump_dir`
  // the outputs are written there as .npy.
  virtual CheckResult check(const Implementation& impl, const nlohmann::json& config,
                            const std::string& dump_dir = "") = 0;
  // Times each job (Google Benchmark); `options.json_path` receives the Google Benchmark JSON of
  // all of them, as run_benchmarks writes it.
  virtual std::vector<BenchOutcome> bench(const std::vector<BenchJob>& jobs,
                                          const BenchOptions& options) = 0;
};

}  // namespace tokamax
