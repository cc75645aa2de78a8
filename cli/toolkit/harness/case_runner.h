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
//
// Setting the case up and computing its oracle are our code, not a candidate's: a worker that
// dies there (the OOM killer, an operator's kill -9) is not the candidate's fault. WorkerRunner
// retries such a step once in a fresh worker (take_retries() says so) and throws CaseLost when it
// dies again: the case cannot be run, the command goes on with the next one.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/framework/bound_args.h"
#include "cli/toolkit/measurement/bench_sampler.h"
#include "cli/toolkit/measurement/timing.h"
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
// (cli/toolkit/measurement/bench_sampler.h).
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

// The worker died twice in a step of ours (setting the case up, computing the oracle): once, and
// again in the fresh worker it was retried in. The message names the step and both deaths.
class CaseLost : public std::runtime_error {
 public:
  explicit CaseLost(const std::string& message) : std::runtime_error(message) {}
};

class CaseRunner {
 public:
  virtual ~CaseRunner() = default;
  // Makes `setup` the current case (nothing to do when it already is, except dumping). Errors of
  // the op itself (input generation) throw; so does CaseLost.
  virtual void setup(const CaseSetup& setup) = 0;
  // Times impl with config on the current case: time_calls, or with warmup_runs == 0 the lean
  // variant of tune's halving (the first call calibrates the batch and counts as a sample when it
  // alone lasts a sample).
  virtual TimeResult time(const Implementation& impl, const nlohmann::json& config,
                          const TimingOptions& timing) = 0;
  // Runs once into zeroed outputs and compares every output with the oracle; with `dump_dir`
  // the outputs are written there as .npy. time(), check() and bench() throw CaseLost when the
  // case cannot be set up again (after a crash) or its oracle cannot be computed.
  virtual CheckResult check(const Implementation& impl, const nlohmann::json& config,
                            const std::string& dump_dir = "") = 0;
  // Times each job (Google Benchmark); `options.json_path` receives the Google Benchmark JSON of
  // all of them, as run_benchmarks writes it.
  virtual std::vector<BenchOutcome> bench(const std::vector<BenchJob>& jobs,
                                          const BenchOptions& options) = 0;
  // The steps retried in a fresh worker since the last call, one sentence each: "the worker
  // died setting up the case (killed by signal 9 (SIGKILL: ...)); retried in a fresh worker".
  virtual std::vector<std::string> take_retries() { return {}; }
};

}  // namespace tokamax
